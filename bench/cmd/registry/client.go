package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1/registryv1connect"
	"github.com/cronmesh/cronmesh/libs/rpcclient"
	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// newClient returns a JobService client on its own HTTP/2 connection (h2c,
// prior knowledge, as in the registry's tests), sending the bench's API key.
// Callers that should not share a connection's frame loop each get one.
func (b *bench) newClient() (registryv1connect.JobServiceClient, error) {
	if b.opts.apiKey == "" {
		return nil, errors.New("no API key: pass --api-key or set CRONMESH_API_KEY")
	}
	httpClient, err := rpcclient.NewHTTPClient(tlsconfig.Client{})
	if err != nil {
		return nil, err
	}
	opts := []connect.ClientOption{connect.WithInterceptors(bearer(b.opts.apiKey))}
	if b.opts.protocol == "grpc" {
		opts = append(opts, connect.WithGRPC())
	}
	if !b.opts.gzip {
		// Unregistering gzip stops the client from advertising it, so the
		// registry answers uncompressed.
		opts = append(opts, connect.WithAcceptCompression("gzip", nil, nil))
	}
	return registryv1connect.NewJobServiceClient(httpClient, b.opts.registryURL, opts...), nil
}

func bearer(key string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+key)
			return next(ctx, req)
		}
	}
}

// errorCounts tallies failed calls by Connect code and keeps the first
// message of each, so a report says what failed without a log dump.
type errorCounts struct {
	mu    sync.Mutex
	count map[connect.Code]int
	first map[connect.Code]string
}

func (e *errorCounts) add(err error) {
	code := connect.CodeOf(err)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.count == nil {
		e.count, e.first = map[connect.Code]int{}, map[connect.Code]string{}
	}
	if e.count[code] == 0 {
		e.first[code] = err.Error()
	}
	e.count[code]++
}

func (e *errorCounts) total() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, c := range e.count {
		n += c
	}
	return n
}

// String is "0" or "3 (deadline_exceeded: first message; ...)".
func (e *errorCounts) String() string {
	n := e.total()
	if n == 0 {
		return "0"
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	parts := make([]string, 0, len(e.count))
	for code, c := range e.count {
		parts = append(parts, fmt.Sprintf("%d %s: %s", c, code, e.first[code]))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d (%s)", n, strings.Join(parts, "; "))
}

// err is nil when nothing failed, else an error summarizing the failures.
func (e *errorCounts) err(what string) error {
	if e.total() == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s failed calls", what, e.String())
}
