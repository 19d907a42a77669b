package slotinfo

import (
	"errors"
	"fmt"
	"mime"
	"slices"
	"strings"
	"unicode/utf8"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
)

// The placeholders of a body template, each with the longest value it can
// take (in bytes, before JSON escaping, which none of them needs: they are
// made of digits, letters, '-', ':', '.' and 'T'/'Z'). The bound makes a
// template's largest rendering known when the job is created.
var placeholders = []placeholder{
	{"nominal_time", len("2006-01-02T15:04:05.999999999Z"), func(s Slot) string { return FormatTime(s.NominalTime) }},
	{"fire_time", len("2006-01-02T15:04:05.999999999Z"), func(s Slot) string {
		if s.FireTime.IsZero() {
			return ""
		}
		return FormatTime(s.FireTime)
	}},
	{"attempt", len("-2147483648"), func(s Slot) string { return itoa(s.Attempt) }},
	{"job_id", maxIDLen, func(s Slot) string { return s.JobID }},
	{"execution_id", maxIDLen, func(s Slot) string { return s.ExecutionID }},
	{"trigger_kind", maxIDLen, func(s Slot) string { return s.TriggerKind }},
	{"namespace", maxIDLen, func(s Slot) string { return s.Namespace }},
}

// placeholder is one name a template may use.
type placeholder struct {
	name   string
	maxLen int
	value  func(Slot) string
}

// maxIDLen bounds the ids, the namespace (63 characters) and the trigger
// kind's name: a UUID is 36.
const maxIDLen = 64

// Placeholders returns the names a template may use, in documentation
// order.
func Placeholders() []string {
	names := make([]string, len(placeholders))
	for i, p := range placeholders {
		names[i] = p.name
	}
	return names
}

// ErrTooLarge: a rendering would be longer than the template's bound (only
// possible for a value longer than its placeholder's maximum, which no
// dispatch request of cronmesh's carries).
var ErrTooLarge = errors.New("slotinfo: rendered body exceeds the template's bound")

// SyntaxError is a template that does not parse: where and why.
type SyntaxError struct {
	// Offset is the byte offset of the "{{" that starts the problem.
	Offset int
	Reason string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("template error at byte %d: %s", e.Offset, e.Reason)
}

// Template is a parsed body template. The language has one construct:
//
//   - "{{name}}" (spaces allowed inside the braces) is replaced by the value
//     of the placeholder name, one of Placeholders();
//   - "{{{{" is a literal "{{" (the escape: "{{{{nominal_time}}" renders as
//     "{{nominal_time}}");
//   - everything else, "}}" and a lone "{" included, is literal.
//
// Any other "{{" is a syntax error, so that a typo fails at create time
// instead of reaching the target.
type Template struct {
	// parts alternate literal text and placeholder indexes (-1 for text).
	parts   []part
	maxSize int
}

type part struct {
	text        string
	placeholder int // index into placeholders, or -1
}

// Parse parses src. It fails with a *SyntaxError.
func Parse(src string) (*Template, error) {
	t := &Template{}
	var literal strings.Builder
	flush := func() {
		if literal.Len() > 0 {
			t.parts = append(t.parts, part{text: literal.String(), placeholder: -1})
			t.maxSize += literal.Len()
			literal.Reset()
		}
	}
	for rest, offset := src, 0; ; {
		i := strings.Index(rest, "{{")
		if i < 0 {
			literal.WriteString(rest)
			break
		}
		literal.WriteString(rest[:i])
		at := offset + i
		rest, offset = rest[i+2:], at+2
		if strings.HasPrefix(rest, "{{") {
			literal.WriteString("{{")
			rest, offset = rest[2:], offset+2
			continue
		}
		end := strings.Index(rest, "}}")
		if end < 0 {
			return nil, &SyntaxError{Offset: at, Reason: `"{{" is not closed by "}}" (write "{{{{" for a literal "{{")`}
		}
		name := strings.TrimSpace(rest[:end])
		idx := slices.IndexFunc(placeholders, func(p placeholder) bool { return p.name == name })
		if idx < 0 {
			shown := name
			if len(shown) > 40 || !utf8.ValidString(shown) {
				shown = "…"
			}
			return nil, &SyntaxError{Offset: at, Reason: fmt.Sprintf("unknown placeholder %q (want one of %s; write \"{{{{\" for a literal \"{{\")",
				shown, strings.Join(Placeholders(), ", "))}
		}
		flush()
		t.parts = append(t.parts, part{placeholder: idx})
		t.maxSize += placeholders[idx].maxLen
		rest, offset = rest[end+2:], offset+end+2
	}
	flush()
	return t, nil
}

// MaxSize is the largest rendering of t in bytes: its literal text plus
// every placeholder's longest value.
func (t *Template) MaxSize() int { return t.maxSize }

// Render fills t with s's values, each JSON-escaped (as inside a JSON
// string, without the quotes) when escapeJSON. It fails with ErrTooLarge
// rather than exceed MaxSize.
func (t *Template) Render(s Slot, escapeJSON bool) ([]byte, error) {
	out := make([]byte, 0, t.maxSize)
	for _, p := range t.parts {
		if p.placeholder < 0 {
			out = append(out, p.text...)
			continue
		}
		v := placeholders[p.placeholder].value(s)
		if escapeJSON {
			v = jsonEscape(v)
		}
		out = append(out, v...)
		if len(out) > t.maxSize {
			return nil, ErrTooLarge
		}
	}
	return out, nil
}

// IsJSON reports whether a content type is JSON (application/json,
// text/json or any +json type, with any parameters).
func IsJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// jsonEscape escapes v for the inside of a JSON string: '"', '\' and
// control characters; invalid UTF-8 becomes U+FFFD.
func jsonEscape(v string) string {
	if !strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == '"' || r == '\\' || r == utf8.RuneError }) {
		return v
	}
	var b strings.Builder
	for _, r := range v {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Body is what a target's body becomes for the attempt of s: body itself
// unless format is BODY_FORMAT_TEMPLATE, the rendered template otherwise,
// JSON-escaped when contentType is JSON. The registry has parsed the
// template already; an error here (a syntax error, ErrTooLarge) means a
// target that bypassed it, and the attempt cannot be made.
func Body(body string, format registryv1.BodyFormat, contentType string, s Slot) ([]byte, error) {
	if format != registryv1.BodyFormat_BODY_FORMAT_TEMPLATE {
		return []byte(body), nil
	}
	t, err := Parse(body)
	if err != nil {
		return nil, err
	}
	return t.Render(s, IsJSON(contentType))
}
