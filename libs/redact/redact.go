package redact

import (
	"errors"
	"net/url"
	"strings"
)

// URL is u's scheme and host (with its port), for spans, logs and error
// messages: the path, query and fragment of a target or webhook URL are
// often the credential itself (capability URLs such as Slack's
// /services/T000/B000/XXXX, a ?token=), and user info always is. A nil u
// gives "".
func URL(u *url.URL) string {
	if u == nil {
		return ""
	}
	if u.Host == "" {
		return strings.ToLower(u.Scheme) + ":"
	}
	return strings.ToLower(u.Scheme) + "://" + u.Host
}

// RawURL is URL of raw parsed; a string that does not parse gives
// "<invalid URL>", never the string itself.
func RawURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<invalid URL>"
	}
	return URL(u)
}

// URLError returns err without the URL that a *url.Error (from net/http
// or url.Parse) repeats in full: its operation and cause, with the
// redacted URL. Other errors are returned as they are.
func URLError(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	return &url.Error{Op: ue.Op, URL: RawURL(ue.URL), Err: ue.Err}
}
