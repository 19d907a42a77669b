package proxytest

import (
	"errors"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a TCP proxy to one server address. Clients connect to
// [Proxy.Addr]; [Proxy.Down] cuts every connection and refuses new ones
// until [Proxy.Up]; [Proxy.Sever] cuts the current connections but keeps
// accepting; [Proxy.Blackhole] makes the server unreachable without an
// error, as a network partition does.
type Proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu     sync.Mutex
	down   bool
	silent bool // Blackhole: accept and hold, forward nothing
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// New starts a proxy on 127.0.0.1 to target (host:port). It starts Up
// unless down is true. t.Cleanup stops it and closes every connection.
func New(t testing.TB, target string, down bool) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxytest: listen: %v", err)
	}
	p := &Proxy{t: t, ln: ln, target: target, down: down, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		// Down first: the accept loop re-checks it under the mutex before
		// registering a connection, so none can slip past the Sever.
		p.Down()
		_ = ln.Close()
		p.wg.Wait()
	})
	return p
}

// NewURL starts a proxy, as New does, to the host of rawURL (on
// defaultPort when rawURL names none) and returns it with rawURL pointed
// at it: the same credentials, path and parameters, through the proxy.
func NewURL(t testing.TB, rawURL, defaultPort string, down bool) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("proxytest: parse the server's URL: %v", err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), defaultPort)
	}
	p := New(t, target, down)
	u.Host = p.Addr()
	return p, u.String()
}

// Addr is the proxy's host:port, for clients.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Down closes every proxied connection and refuses new ones (they are
// accepted and closed at once, which clients see as a reset or EOF).
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down, p.silent = true, false
	p.mu.Unlock()
	p.Sever()
}

// Blackhole keeps every connection open but forwards nothing either way
// from now on, and accepts new connections only to hold them in the same
// silence: clients see no error, only requests that never get an answer,
// until their own timeouts (a server behind a network partition). Up or
// Down ends it, cutting the connections that lived through it (bytes were
// lost).
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down, p.silent = false, true
}

// Up lets new connections through again; after a Blackhole it first cuts
// the connections that lived through it.
func (p *Proxy) Up() {
	p.mu.Lock()
	wasSilent := p.silent
	p.down, p.silent = false, false
	p.mu.Unlock()
	if wasSilent {
		p.Sever()
	}
}

// Sever closes every proxied connection, as a broker restart would, but
// keeps accepting new ones unless the proxy is Down.
func (p *Proxy) Sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.t.Errorf("proxytest: accept: %v", err)
			}
			return
		}
		p.mu.Lock()
		down, silent := p.down, p.silent
		if silent {
			p.conns[client] = struct{}{} // held open, unanswered
		}
		p.mu.Unlock()
		if down {
			_ = client.Close()
			continue
		}
		if silent {
			continue
		}
		upstream, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = client.Close()
			_ = upstream.Close()
			continue
		}
		p.conns[client] = struct{}{}
		p.conns[upstream] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(client, upstream)
		go p.pipe(upstream, client)
	}
}

// pipe copies src to dst, dropping what it reads while the proxy is
// silent; when either side ends, both are closed so the peer notices
// promptly.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isSilent() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

func (p *Proxy) isSilent() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.silent
}
