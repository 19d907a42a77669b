package proxytest

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy to one server address. Clients connect to
// [Proxy.Addr]; [Proxy.Down] cuts every connection and refuses new ones
// until [Proxy.Up]; [Proxy.Sever] cuts the current connections but keeps
// accepting.
type Proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
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

// Addr is the proxy's host:port, for clients.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Down closes every proxied connection and refuses new ones (they are
// accepted and closed at once, which clients see as a reset or EOF).
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	p.Sever()
}

// Up lets new connections through again.
func (p *Proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
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
		down := p.down
		p.mu.Unlock()
		if down {
			_ = client.Close()
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

// pipe copies src to dst; when either side ends, both are closed so the
// peer notices promptly.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}
