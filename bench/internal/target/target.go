// Package target is the receiving end of the end-to-end benchmark: an HTTP
// server on loopback that answers every webhook 204 and records, for each
// delivery, the job it was for (from the path /j/<index> the benchmark
// registered), its webhook-id and the moment it arrived. Recording is an
// append under a mutex; everything else (matching deliveries to slots) is
// done after the run so that the target costs the machine as little CPU as
// possible while it is measured.
package target

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/cronmesh/cronmesh/libs/slotinfo"
)

// Delivery is one request the target received.
type Delivery struct {
	Job       int32     // index of the job in the plan; -1 when the path named none
	WebhookID uuid.UUID // the execution id; uuid.Nil when missing or malformed
	At        time.Time // arrival, read when the handler starts
	// Nominal is the slot's nominal time from its cronmesh-nominal-time
	// header (zero when missing), so that a running benchmark can judge
	// lateness without inverting execution ids (the ledger's work, for
	// after the run).
	Nominal time.Time
}

// Server records deliveries. Its zero value is not usable; call Start.
type Server struct {
	URL string // http://127.0.0.1:port

	srv *http.Server
	mu  sync.Mutex
	got []Delivery
	bad int // requests without a job path or webhook-id
}

// Start listens on a free loopback port and serves until Close.
func Start() (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + l.Addr().String(), got: make([]Delivery, 0, 1<<16)}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// ServeHTTP records the delivery and answers 204 No Content.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d := Delivery{At: time.Now(), Job: -1}
	if rest, ok := strings.CutPrefix(r.URL.Path, "/j/"); ok {
		if i, err := strconv.ParseInt(rest, 10, 32); err == nil && i >= 0 {
			d.Job = int32(i)
		}
	}
	id, idErr := uuid.Parse(r.Header.Get("webhook-id"))
	if idErr == nil {
		d.WebhookID = id
	}
	d.Nominal, _ = time.Parse(time.RFC3339Nano, r.Header.Get(slotinfo.HeaderNominalTime))
	s.mu.Lock()
	s.got = append(s.got, d)
	if d.Job < 0 || idErr != nil {
		s.bad++
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// Count is the number of deliveries so far.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// Malformed is the number of requests without a job path or a valid
// webhook-id (they are in Deliveries too).
func (s *Server) Malformed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bad
}

// Deliveries returns a copy of every delivery so far, in arrival order.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.got...)
}

// Since returns a copy of the deliveries from index i on.
func (s *Server) Since(i int) []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.got) {
		return nil
	}
	return append([]Delivery(nil), s.got[i:]...)
}

// WaitQuiet returns once no delivery has arrived for quiet, or at deadline
// (false), or when ctx ends.
func (s *Server) WaitQuiet(ctx context.Context, quiet time.Duration, deadline time.Time) bool {
	last, lastChange := s.Count(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
		if n := s.Count(); n != last {
			last, lastChange = n, time.Now()
		}
		if time.Since(lastChange) >= quiet {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// Close stops the server.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
