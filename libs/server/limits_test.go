package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/authn"
	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cronmesh/cronmesh/libs/server"
	"github.com/cronmesh/cronmesh/libs/testkit/rpctest"
)

// gzipZeros returns n zero bytes gzipped, without ever holding the n
// bytes: one gzip member of up to 1 MiB of zeros at best compression
// (about 1 KB), repeated. A gzip reader reads concatenated members as one
// stream, so 256 MiB of zeros is a body of about 260 KB, built in
// milliseconds rather than by deflating 256 MiB (half a minute under the
// race detector).
func gzipZeros(t *testing.T, n int64) []byte {
	t.Helper()
	const chunk = 1 << 20
	var member bytes.Buffer
	zw, err := gzip.NewWriterLevel(&member, gzip.BestCompression)
	require.NoError(t, err)
	_, err = io.Copy(zw, io.LimitReader(zeros{}, min(n, chunk)))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	require.Zero(t, n%chunk, "whole MiB only")
	return bytes.Repeat(member.Bytes(), int(max(n/chunk, 1)))
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// protocol posts one raw request body to a procedure and returns the
// call's Connect code (0 for success).
type protocol func(t *testing.T, client *http.Client, url, key string, body []byte, gzipped bool) connect.Code

// connectUnary posts body with the Connect unary protocol; gzipped bodies
// say so in Content-Encoding.
func connectUnary(t *testing.T, client *http.Client, url, key string, body []byte, gzipped bool) connect.Code {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/proto")
	if gzipped {
		req.Header.Set("Content-Encoding", "gzip")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	if res.StatusCode == http.StatusOK {
		return 0
	}
	var wire struct {
		Code connect.Code `json:"code"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&wire), "HTTP %d", res.StatusCode)
	return wire.Code
}

// grpcMessage posts body as one gRPC message (flagged compressed, with
// grpc-encoding gzip, when gzipped) over h2c.
func grpcMessage(t *testing.T, client *http.Client, url, key string, body []byte, gzipped bool) connect.Code {
	t.Helper()
	envelope := make([]byte, 5, 5+len(body))
	if gzipped {
		envelope[0] = 1
	}
	binary.BigEndian.PutUint32(envelope[1:], uint32(len(body)))
	envelope = append(envelope, body...)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(envelope))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	if gzipped {
		req.Header.Set("Grpc-Encoding", "gzip")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	status := res.Header.Get("Grpc-Status") // a trailers-only response
	if status == "" {
		status = res.Trailer.Get("Grpc-Status")
	}
	code, err := strconv.Atoi(status)
	require.NoError(t, err, "grpc-status %q (HTTP %d)", status, res.StatusCode)
	return connect.Code(code)
}

// TestRequestBodiesAreBounded sends bodies that are large, or small but
// inflate to 256 MiB (the gzip bomb of issue 19), to health, reflection and
// a service behind authentication, and checks each is refused while the
// process allocates next to nothing: without the limits one such request
// allocated gigabytes. It does not run in parallel, so that TotalAlloc
// counts only its own requests.
func TestRequestBodiesAreBounded(t *testing.T) {
	const maxRequest = 1 << 20
	bomb := gzipZeros(t, 256<<20)
	require.Less(t, len(bomb), 300<<10, "the bomb is a small body")
	zr, err := gzip.NewReader(bytes.NewReader(bomb))
	require.NoError(t, err)
	inflated, err := io.Copy(io.Discard, zr)
	require.NoError(t, err)
	require.EqualValues(t, 256<<20, inflated, "the bomb inflates to 256 MiB")
	smallBomb := gzipZeros(t, 1<<20) // inflates past health's limit, not past its raw bound
	require.Less(t, len(smallBomb), 4<<10)
	large := bytes.Repeat([]byte("x"), 2*maxRequest) // past both bounds

	f := startWith(t, server.Options{Limits: server.Limits{MaxRequestBytes: maxRequest}}, func(s *server.Server) {
		s.UseMiddleware(authn.NewMiddleware(func(_ context.Context, r *http.Request) (any, error) {
			if r.Header.Get("Authorization") != "Bearer secret" {
				return nil, authn.Errorf("no valid key")
			}
			return "tester", nil
		}).Wrap)
	})
	f.srv.SetServing(true)

	const (
		health       = "/grpc.health.v1.Health/Check"
		reflection   = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
		reflectionV1 = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
	)
	tests := []struct {
		name     string
		protocol protocol
		path     string
		key      string
		body     []byte
		gzipped  bool
		want     connect.Code
	}{
		{"health, Connect, bomb", connectUnary, health, "", bomb, true, connect.CodeResourceExhausted},
		{"health, gRPC, bomb", grpcMessage, health, "", bomb, true, connect.CodeResourceExhausted},
		{"health, Connect, small bomb", connectUnary, health, "", smallBomb, true, connect.CodeResourceExhausted},
		{"health, gRPC, small bomb", grpcMessage, health, "", smallBomb, true, connect.CodeResourceExhausted},
		{"reflection v1, gRPC, bomb", grpcMessage, reflection, "", bomb, true, connect.CodeResourceExhausted},
		{"reflection v1alpha, gRPC, bomb", grpcMessage, reflectionV1, "", bomb, true, connect.CodeResourceExhausted},
		{"reflection v1, gRPC, small bomb", grpcMessage, reflection, "", smallBomb, true, connect.CodeResourceExhausted},
		{"service without a key, Connect, bomb", connectUnary, echoProcedure, "", bomb, true, connect.CodeUnauthenticated},
		{"service without a key, gRPC, bomb", grpcMessage, echoProcedure, "", bomb, true, connect.CodeUnauthenticated},
		{"service with a key, Connect, bomb", connectUnary, echoProcedure, "secret", bomb, true, connect.CodeResourceExhausted},
		{"service with a key, gRPC, bomb", grpcMessage, echoProcedure, "secret", bomb, true, connect.CodeResourceExhausted},
		{"service with a key, Connect, large body", connectUnary, echoProcedure, "secret", large, false, connect.CodeResourceExhausted},
		{"service with a key, gRPC, large body", grpcMessage, echoProcedure, "secret", large, false, connect.CodeResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got := tt.protocol(t, f.h2c, f.url+tt.path, tt.key, tt.body, tt.gzipped)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			require.Less(t, allocated, uint64(32<<20), "allocated %d MiB for one request", allocated>>20)
			require.Equal(t, tt.want, got)
		})
	}

	// A message under the limit still gets through, compressed or not.
	for _, compression := range []string{"", "gzip"} {
		opts := []connect.ClientOption{connect.WithGRPC()}
		if compression != "" {
			opts = append(opts, connect.WithSendCompression(compression))
		}
		req := connect.NewRequest(wrapperspb.String(string(bytes.Repeat([]byte("x"), maxRequest-16))))
		req.Header().Set("Authorization", "Bearer secret")
		res, err := f.echoClient(opts...).CallUnary(t.Context(), req)
		require.NoError(t, err, "compression %q", compression)
		require.Equal(t, proto.Size(req.Msg), proto.Size(res.Msg))
	}
}

// TestSlowBodyIsCutOff trickles a request body a byte at a time: the server
// must end the call at its ReadTimeout, long before the body is complete.
func TestSlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	f := startWith(t, server.Options{Limits: server.Limits{ReadTimeout: 300 * time.Millisecond}}, nil)
	f.srv.SetServing(true)
	const bodyBytes = 500 // at a byte every 20 ms, 10 s to send it all
	for name, client := range map[string]*http.Client{"HTTP/1.1": {}, "h2c": f.h2c} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body, trickle := io.Pipe()
			sent := make(chan int, 1)
			go func() {
				n := 0
				for ; n < bodyBytes; n++ {
					if _, err := trickle.Write([]byte{'x'}); err != nil {
						break // the server, or the client after its response, gave up
					}
					time.Sleep(20 * time.Millisecond)
				}
				_ = trickle.Close()
				sent <- n
			}()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url+echoProcedure, body)
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/proto")
			res, err := client.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				require.NotEqual(t, http.StatusOK, res.StatusCode)
			}
			_ = body.CloseWithError(io.ErrClosedPipe) // stop the trickle
			require.Less(t, <-sent, bodyBytes, "the call ended only once the whole body was sent")
		})
	}
}

// TestSlowHandlerIsNotCutOff checks that ReadTimeout bounds reading the
// request only: a handler still working after it, once the body has been
// read, is neither cancelled nor kept from answering. (net/http lifts the
// read deadline once the body is read; a read deadline expiring under an
// HTTP/1.1 handler would cancel its context.)
func TestSlowHandlerIsNotCutOff(t *testing.T) {
	t.Parallel()
	const readTimeout = 200 * time.Millisecond
	for _, h2c := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "h2c"}[h2c], func(t *testing.T) {
			t.Parallel()
			f := startWith(t, server.Options{Limits: server.Limits{ReadTimeout: readTimeout}}, nil)
			f.srv.SetServing(true)
			client := &http.Client{}
			if h2c {
				client = f.h2c
			}
			done := make(chan error, 1)
			go func() {
				c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](client, f.url+echoProcedure)
				_, err := c.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("block")))
				done <- err
			}()
			<-f.echo.entered
			time.Sleep(3 * readTimeout) // the handler outlives the read deadline
			close(f.echo.release)
			require.NoError(t, <-done)
		})
	}
}

// TestAllowLongCalls: a call still running at the WriteTimeout is cut off,
// unless its procedure was given longer with AllowLongCalls.
func TestAllowLongCalls(t *testing.T) {
	t.Parallel()
	const writeTimeout = 200 * time.Millisecond
	for _, allowed := range []bool{false, true} {
		t.Run(map[bool]string{false: "cut off", true: "allowed"}[allowed], func(t *testing.T) {
			t.Parallel()
			srv, err := server.New(server.Options{Name: "test", Listen: "127.0.0.1:0", Limits: server.Limits{ReadTimeout: writeTimeout, WriteTimeout: writeTimeout}})
			require.NoError(t, err)
			echo := newEchoService()
			h := echo.handler(srv.HandlerOptions()...)
			if allowed {
				h = server.AllowLongCalls(h, time.Minute, echoProcedure)
			}
			srv.Handle(testService, testPath, h)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- srv.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				require.NoError(t, <-done)
			})
			<-srv.Ready()
			client := rpctest.H2CClient()
			t.Cleanup(client.CloseIdleConnections)

			called := make(chan error, 1)
			go func() {
				c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](client, "http://"+srv.Addr()+echoProcedure)
				_, err := c.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("block")))
				called <- err
			}()
			<-echo.entered
			time.Sleep(3 * writeTimeout) // the call outlives the server's WriteTimeout
			close(echo.release)
			if allowed {
				require.NoError(t, <-called)
			} else {
				require.Error(t, <-called)
			}
		})
	}
}
