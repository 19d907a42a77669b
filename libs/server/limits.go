package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
)

// Defaults of Limits.
const (
	// DefaultMaxRequestBytes is the largest legitimate request of the five
	// APIs with some headroom: a registry BatchCreateJobs of 1,000 jobs (its
	// MaxBatch), each at every per-job limit of the registry's validation,
	// in binary protobuf. One such job is about 434 KB: the body (256 KiB),
	// 32 headers of a 256-byte name and a 4 KiB value (136 KiB), 64 labels
	// of a 63-byte key and a 255-byte value (20 KiB), the description (2,000
	// characters of up to 4 UTF-8 bytes) and display name (200), the URL
	// (2,048 bytes), the cron expression (256), 100 status codes, the
	// request id (128) and a few small fields. Times 1,000 that is 434 MB
	// (414 MiB), which the registry's TestLargestBatchFitsTheDefaultLimit
	// builds and checks against this value. A JSON client pays more for a
	// body full of characters JSON escapes; it can use the binary codec or
	// smaller batches.
	DefaultMaxRequestBytes = 448 << 20
	// SmallAPIMaxRequestBytes is the default of the services whose largest
	// request is far smaller than the registry's (trigger, dispatcher,
	// history, alerting): a dead-letter redrive whose target override is at
	// every cap (a 256 KiB body, 32 headers of 4 KiB) is under 1 MiB. The
	// registry's 448 MiB there would let one authenticated call make a
	// replica hold that much.
	SmallAPIMaxRequestBytes = 4 << 20
	// DefaultReadTimeout bounds reading a request's headers and body: 448 MiB
	// at 8 MiB/s, a slow link, fits, while a client trickling its body
	// holds its connection no longer than this.
	DefaultReadTimeout = time.Minute
	// DefaultWriteTimeout bounds a call from the end of its headers to the
	// end of its response (reading the body, handling, answering), so a
	// client that stops reading its response does not hold a connection and
	// the response's memory for ever. It may not be shorter than the read
	// timeout.
	DefaultWriteTimeout = 2 * time.Minute
	// DefaultIdleTimeout closes keep-alive connections idle this long.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxHeaderBytes bounds a request's header block (request line
	// included for HTTP/1.1): room for an API key, trace context and a
	// Connect GET query, a sixteenth of net/http's 1 MiB default.
	DefaultMaxHeaderBytes = 64 << 10
)

// Fixed limits of the services every Server mounts without credentials, so
// an anonymous client cannot make them read more than a few kilobytes.
const (
	// healthMaxBytes bounds a grpc.health.v1 request: a service name.
	healthMaxBytes = 4 << 10
	// reflectionMaxBytes bounds one reflection request: a symbol or file
	// name.
	reflectionMaxBytes = 16 << 10
	// reflectionStreamBytes bounds the raw body of one reflection stream,
	// all its requests together: grpcurl's describe of every service sends
	// a few dozen.
	reflectionStreamBytes = 64 << 10
)

// Limits bound what one request may cost a Server. Zero fields take their
// defaults; New refuses negative ones, and a WriteTimeout shorter than the
// ReadTimeout.
type Limits struct {
	// MaxRequestBytes bounds one request message of a mounted service after
	// decompression (connect.WithReadMaxBytes, in HandlerOptions) and, with
	// an allowance for framing, its raw body on the wire
	// (http.MaxBytesReader) — so neither a large body nor a small compressed
	// one that inflates (a gzip bomb) is read past it. Beyond it the call
	// fails with RESOURCE_EXHAUSTED. 0 means DefaultMaxRequestBytes. The
	// health and reflection services have small fixed limits of their own;
	// HandleHTTP handlers get the raw bound.
	MaxRequestBytes int
	// ReadTimeout bounds reading a request, headers and body, from its first
	// byte: a client trickling its body is cut off. net/http lifts it once
	// the body has been read, so it never cuts off a slow handler. 0 means
	// DefaultReadTimeout.
	ReadTimeout time.Duration
	// WriteTimeout bounds a call from the end of its request headers to the
	// end of its response; AllowLongCalls lifts it for calls meant to run
	// longer. 0 means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. 0 means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (HTTP/1.1: with the request
	// line; HTTP/2: the advertised header list size). 0 means
	// DefaultMaxHeaderBytes.
	MaxHeaderBytes int
}

func (l Limits) withDefaults() (Limits, error) {
	if l.MaxRequestBytes < 0 || l.ReadTimeout < 0 || l.WriteTimeout < 0 || l.IdleTimeout < 0 || l.MaxHeaderBytes < 0 {
		return l, errors.New("limits must not be negative")
	}
	if l.MaxRequestBytes == 0 {
		l.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if l.ReadTimeout == 0 {
		l.ReadTimeout = DefaultReadTimeout
	}
	if l.WriteTimeout == 0 {
		l.WriteTimeout = DefaultWriteTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.WriteTimeout < l.ReadTimeout {
		// On HTTP/1.1 the write deadline runs from the end of the headers:
		// it would cut off a body still allowed to arrive.
		return l, fmt.Errorf("the write timeout (%s) must not be shorter than the read timeout (%s)", l.WriteTimeout, l.ReadTimeout)
	}
	return l, nil
}

// rawBodyBytes is the raw body a message of up to maxMessage decompressed
// bytes may need: compression of incompressible data adds a little (deflate:
// 5 bytes per 64 KiB block, gzip: an 18-byte frame) and gRPC 5 bytes a
// message.
func rawBodyBytes(maxMessage int) int64 {
	return int64(maxMessage) + int64(maxMessage)/256 + 4<<10
}

// bodyLimit returns the raw body limit of a request to path.
func (s *Server) bodyLimit(path string) int64 {
	switch {
	case strings.HasPrefix(path, "/"+grpchealth.HealthV1ServiceName+"/"):
		return rawBodyBytes(healthMaxBytes)
	case strings.HasPrefix(path, "/"+grpcreflect.ReflectV1ServiceName+"/"),
		strings.HasPrefix(path, "/"+grpcreflect.ReflectV1AlphaServiceName+"/"):
		return reflectionStreamBytes
	default:
		return rawBodyBytes(s.limits.MaxRequestBytes)
	}
}

// boundBodies serves next with each request body bounded to limit(path)
// bytes: reading past it fails with *http.MaxBytesError, which Connect
// answers with RESOURCE_EXHAUSTED, and the connection is closed after the
// response. Connect bounds the message itself, but once over its limit it
// reads the rest of the body to discard it, however long; and HandleHTTP
// handlers have no limit of their own.
func boundBodies(next http.Handler, limit func(path string) int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bounded := *r // as http.MaxBytesHandler: the server's request stays unchanged
		bounded.Body = http.MaxBytesReader(w, r.Body, limit(r.URL.Path))
		next.ServeHTTP(w, &bounded)
	})
}

// AllowLongCalls returns h in which a call to one of procedures (full paths
// such as "/cronmesh.trigger.v1.TriggerService/BackfillJob") has d, from its
// start, to be handled and answered instead of the server's WriteTimeout:
// for calls that legitimately run long, such as a paced backfill. Other
// paths pass through unchanged.
func AllowLongCalls(h http.Handler, d time.Duration, procedures ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range procedures {
			if r.URL.Path == p {
				// Fails only where deadlines are not supported: no
				// WriteTimeout applies then either.
				_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
				break
			}
		}
		h.ServeHTTP(w, r)
	})
}
