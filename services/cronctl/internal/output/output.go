// Package output prints API objects for people (aligned tables) and for
// scripts (protojson, or YAML converted from it), and prints errors with
// their Connect code and every BadRequest field violation.
package output

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// Format is how results are printed.
type Format string

// Formats.
const (
	Table Format = "table"
	JSON  Format = "json"
	YAML  Format = "yaml"
)

// Printer writes results to one writer in one format.
type Printer struct {
	w      io.Writer
	format Format
}

// NewPrinter returns a Printer; an unknown format prints tables.
func NewPrinter(w io.Writer, format Format) *Printer {
	switch format {
	case JSON, YAML:
	default:
		format = Table
	}
	return &Printer{w: w, format: format}
}

// Format is the Printer's format.
func (p *Printer) Format() Format { return p.format }

// marshal is protojson with proto field JSON names (camelCase), the names
// jobs.yaml uses too, so output can be edited and applied back.
var marshal = protojson.MarshalOptions{}

// Object prints one message: as protojson (or YAML), or, for tables, as the
// key/value rows that rows returns.
func (p *Printer) Object(m proto.Message, rows func() [][2]string) error {
	if p.format == Table {
		tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
		for _, r := range rows() {
			fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
		}
		return tw.Flush()
	}
	raw, err := marshal.Marshal(m)
	if err != nil {
		return err
	}
	return p.structured(raw)
}

// List prints a page of messages: for scripts {"items": [...],
// "nextPageToken": "..."}; for people a table with headers, one row per item,
// and a hint on how to get the next page.
func (p *Printer) List(items []proto.Message, nextPageToken string, headers []string, row func(proto.Message) []string) error {
	if p.format == Table {
		tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(headers, "\t"))
		for _, m := range items {
			fmt.Fprintln(tw, strings.Join(row(m), "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if nextPageToken != "" {
			_, err := fmt.Fprintf(p.w, "(more: --page-token %s)\n", nextPageToken)
			return err
		}
		return nil
	}
	list := struct {
		Items         []json.RawMessage `json:"items"`
		NextPageToken string            `json:"nextPageToken,omitempty"`
	}{Items: []json.RawMessage{}, NextPageToken: nextPageToken}
	for _, m := range items {
		raw, err := marshal.Marshal(m)
		if err != nil {
			return err
		}
		list.Items = append(list.Items, raw)
	}
	raw, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return p.structured(raw)
}

// structured prints JSON indented, or as YAML.
func (p *Printer) structured(raw []byte) error {
	if p.format == YAML {
		y, err := yaml.JSONToYAML(raw)
		if err != nil {
			return err
		}
		_, err = p.w.Write(y)
		return err
	}
	// protojson's whitespace is deliberately unstable; indent it ourselves.
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := p.w.Write(buf.Bytes())
	return err
}

// Error prints err for a person: a Connect error as "error: <code>: <message>"
// followed by each google.rpc.BadRequest field violation on its own line
// ("  job.schedule.cron: ..."); any other error as "error: <err>".
func Error(w io.Writer, err error) {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		fmt.Fprintf(w, "error: %v\n", err)
		return
	}
	fmt.Fprintf(w, "error: %s: %s\n", cerr.Code(), cerr.Message())
	for _, d := range cerr.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if br, ok := v.(*errdetails.BadRequest); ok {
			for _, fv := range br.GetFieldViolations() {
				fmt.Fprintf(w, "  %s: %s\n", fv.GetField(), fv.GetDescription())
			}
		}
	}
}

// Redactor is a writer that replaces every occurrence of a secret with
// "<redacted>" before writing. The CLI wraps stdout and stderr in it so that
// the API key cannot be printed even by a path that forgot about it (an
// error echoing a header, a server message quoting the request). It masks
// within each Write; every printer in this package writes whole lines.
type Redactor struct {
	w      io.Writer
	secret []byte
}

// NewRedactor wraps w; an empty secret masks nothing.
func NewRedactor(w io.Writer, secret string) *Redactor {
	return &Redactor{w: w, secret: []byte(secret)}
}

// Write writes p with the secret masked. It reports len(p) on success so
// that callers see a complete write even when the masked text is longer.
func (r *Redactor) Write(p []byte) (int, error) {
	if len(r.secret) == 0 || !bytes.Contains(p, r.secret) {
		return r.w.Write(p)
	}
	if _, err := r.w.Write(bytes.ReplaceAll(p, r.secret, []byte("<redacted>"))); err != nil {
		return 0, err
	}
	return len(p), nil
}
