// Package echo is the webhook target of the local stack (`make dev`): it
// logs every request it receives, one line each, with the headers a
// cronmesh delivery carries (webhook-id, Idempotency-Key, traceparent, the
// slot's cronmesh-nominal-time, cronmesh-attempt, cronmesh-trigger-kind) and
// the start of the body, and answers what the path asks for, so that the
// README's tour can show a succeeding job, a failing one and a slow one
// without any other server and without internet access.
//
// Paths, for any method:
//
//	/status/{code}      answers {code} (200 to 599)
//	/slow/{duration}    waits {duration} (a Go duration, at most MaxSlow), then answers 200
//	anything else       answers 200
//
// Every answer is a small JSON object naming the method, path and status,
// which is what the history shows as the response excerpt.
package echo

import (
	"cmp"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Defaults of Options.
const (
	// DefaultExcerptBytes is how much of a request body a log line shows:
	// enough for a demo payload or an alert's summary, not a whole document.
	DefaultExcerptBytes = 200
	// DefaultMaxSlow bounds /slow/{duration}: longer than a delivery's
	// largest timeout (5 min) would only hold a connection for nothing.
	DefaultMaxSlow = 5 * time.Minute
	// maxBody is how much of a body is read (and then dropped) so that the
	// connection can be reused; cronmesh sends at most 256 KiB.
	maxBody = 1 << 20
)

// Options configure the handler New returns.
type Options struct {
	// Log receives one Info record per request. Nil discards them.
	Log *slog.Logger
	// ExcerptBytes is how many bytes of the body a record holds; 0 means
	// DefaultExcerptBytes, negative means none.
	ExcerptBytes int
	// MaxSlow is the longest /slow/{duration} accepted; 0 means
	// DefaultMaxSlow.
	MaxSlow time.Duration
	// Stop, when closed, makes waiting /slow requests answer 503 at once,
	// so that a graceful shutdown does not wait for them. Nil: never.
	Stop <-chan struct{}
}

// handler is the echo target; see the package doc.
type handler struct {
	log     *slog.Logger
	excerpt int
	maxSlow time.Duration
	stop    <-chan struct{}
}

// New returns the echo handler.
func New(opts Options) http.Handler {
	return &handler{
		log:     cmp.Or(opts.Log, slog.New(slog.DiscardHandler)),
		excerpt: cmp.Or(opts.ExcerptBytes, DefaultExcerptBytes),
		maxSlow: cmp.Or(opts.MaxSlow, DefaultMaxSlow),
		stop:    opts.Stop,
	}
}

// ServeHTTP reads the body (for the log line), then answers as the path
// says.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if arg, ok := strings.CutPrefix(r.URL.Path, "/status/"); ok {
		code, err := strconv.Atoi(arg)
		if err != nil || code < 200 || code > 599 {
			h.answer(w, r, body, http.StatusBadRequest, "want /status/{code} with a code from 200 to 599")
			return
		}
		h.answer(w, r, body, code, "")
		return
	}
	if arg, ok := strings.CutPrefix(r.URL.Path, "/slow/"); ok {
		d, err := time.ParseDuration(arg)
		if err != nil || d < 0 || d > h.maxSlow {
			h.answer(w, r, body, http.StatusBadRequest, "want /slow/{duration} with a Go duration from 0s to "+h.maxSlow.String())
			return
		}
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-h.stop:
			h.answer(w, r, body, http.StatusServiceUnavailable, "shutting down")
			return
		case <-r.Context().Done():
			// The caller gave up (its timeout): nobody reads an answer,
			// but the line shows that the request came.
			h.record(r, body, 0, "caller went away")
			return
		}
	}
	h.answer(w, r, body, http.StatusOK, "")
}

// answer writes code with a JSON body and logs the request.
func (h *handler) answer(w http.ResponseWriter, r *http.Request, body []byte, code int, problem string) {
	resp := struct {
		Echo   string `json:"echo"`
		Method string `json:"method"`
		Path   string `json:"path"`
		Status int    `json:"status"`
		Error  string `json:"error,omitempty"`
	}{"cronmesh devecho", r.Method, r.URL.Path, code, problem}
	if code == http.StatusNoContent || code == http.StatusNotModified {
		// These answers have no body (net/http would refuse to write one).
		w.WriteHeader(code)
		h.record(r, body, code, problem)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(resp)
	h.record(r, body, code, problem)
}

// record logs the request as one line: what a developer watching a
// delivery wants to see, and nothing of the signature (which is a secret's
// function and means nothing to read).
func (h *handler) record(r *http.Request, body []byte, code int, problem string) {
	attrs := []any{
		"method", r.Method,
		"path", r.URL.RequestURI(),
		"status", code,
		"webhook_id", r.Header.Get("webhook-id"),
		"idempotency_key", r.Header.Get("Idempotency-Key"),
		"traceparent", r.Header.Get("traceparent"),
		"nominal_time", r.Header.Get("cronmesh-nominal-time"),
		"attempt", r.Header.Get("cronmesh-attempt"),
		"trigger_kind", r.Header.Get("cronmesh-trigger-kind"),
	}
	if h.excerpt > 0 {
		attrs = append(attrs, "bytes", len(body), "body", excerpt(body, h.excerpt))
	}
	if problem != "" {
		attrs = append(attrs, "error", problem)
	}
	h.log.Info("request", attrs...)
}

// excerpt returns at most n bytes of b as text, cut at a rune boundary and
// marked with "..." when cut.
func excerpt(b []byte, n int) string {
	if len(b) <= n {
		return strings.ToValidUTF8(string(b), "?")
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return strings.ToValidUTF8(string(b[:cut]), "?") + "..."
}
