package targetcheck

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/cronmesh/cronmesh/gen/go/cronmesh/registry/v1"
	"github.com/cronmesh/cronmesh/libs/reqlimit"
	"github.com/cronmesh/cronmesh/libs/rpcerr"
	"github.com/cronmesh/cronmesh/libs/slotinfo"
	"github.com/cronmesh/cronmesh/libs/webhooksign"
)

// Limits of a target. They bound what one job costs the mesh (bytes on the
// broker, time in the dispatcher).
// The sizes are reqlimit's, shared with the dispatcher's other requests.
const (
	MaxURL = reqlimit.MaxURLBytes
	// MaxHeaders counts headers and secret_headers together.
	MaxHeaders         = reqlimit.MaxHeaders
	MaxHeaderName      = reqlimit.MaxHeaderNameBytes
	MaxHeaderValue     = reqlimit.MaxHeaderValueBytes
	MaxBody            = reqlimit.MaxBodyBytes
	MaxStatusCodes     = reqlimit.MaxStatusCodes
	MinTimeout         = time.Second
	MaxTimeout         = 30 * time.Minute
	DefaultTimeout     = 30 * time.Second
	MaxAMQPName        = reqlimit.MaxAMQPNameBytes
	DefaultContentType = "application/json"
)

// Rules that are tables, not state: compiled once and never written.
var (
	headerNamePattern = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	// forbiddenHeaders are set by the dispatcher itself or describe the
	// connection rather than the request; letting a job set them would let it
	// forge a signature, a trace or smuggle a second request.
	forbiddenHeaders = []string{
		"connection", "content-length", "host", "keep-alive", "proxy-authorization", "proxy-connection",
		"te", "trailer", "transfer-encoding", "upgrade", "traceparent", "tracestate", "baggage",
		"webhook-id", "webhook-timestamp", "webhook-signature", "idempotency-key",
	}
	// credentialHeaders carry a credential by convention; given in plain
	// headers they are moved to the secret ones (lower case).
	credentialHeaders = []string{
		"authorization", "cookie", "x-api-key", "api-key", "x-auth-token", "x-access-token", "private-token",
	}
	httpMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
)

// Checker validates targets. Build it with New; the zero Checker refuses
// every AMQP target.
type Checker struct {
	amqp *AMQPPolicy
}

// New returns a Checker whose AMQP targets must satisfy policy.
func New(policy *AMQPPolicy) *Checker {
	return &Checker{amqp: policy}
}

// Target checks t (at field, for example "job.target" or
// "target_override") as it will be delivered for namespace, and fills its
// defaults in place: method POST, timeout DefaultTimeout, content type
// DefaultContentType. Credential headers are moved to the secret ones
// first (MoveCredentialHeaders). An empty signing secret passes (the
// registry generates one, a redrive keeps the job's); a given one must be
// well formed. It never stops at the first problem.
func (c *Checker) Target(v *rpcerr.Violations, field, namespace string, t *registryv1.Target) {
	c.check(v, field, namespace, t, false)
}

// Partial is Target for a target whose secrets are not completed yet (a
// redrive's override before the dead letter it replaces is read): a
// secret header with an empty value passes. Call Target once KeepSecrets
// has completed it.
func (c *Checker) Partial(v *rpcerr.Violations, field, namespace string, t *registryv1.Target) {
	c.check(v, field, namespace, t, true)
}

func (c *Checker) check(v *rpcerr.Violations, field, namespace string, t *registryv1.Target, partial bool) {
	MoveCredentialHeaders(t)
	switch k := t.GetKind().(type) {
	case *registryv1.Target_Http:
		httpTarget(v, field+".http", k.Http, partial)
	case *registryv1.Target_Amqp:
		c.amqpTarget(v, field+".amqp", namespace, k.Amqp, partial)
	default:
		v.Add(field, "one of http or amqp is required")
	}
}

func httpTarget(v *rpcerr.Violations, field string, t *registryv1.HttpTarget, partial bool) {
	if t == nil {
		v.Add(field, "is required")
		return
	}
	t.Method = strings.ToUpper(cmp.Or(t.Method, http.MethodPost))
	if !slices.Contains(httpMethods, t.Method) {
		v.Add(field+".method", "must be one of %s", strings.Join(httpMethods, ", "))
	}
	if len(t.Url) > MaxURL {
		v.Add(field+".url", "must be at most %d characters", MaxURL)
	} else if u, err := url.Parse(t.Url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		v.Add(field+".url", "must be an absolute http or https URL without credentials")
	}
	headers(v, field, t.Headers, t.SecretHeaders, true, partial)
	body(v, field, t.Body, t.BodyFormat)
	t.Timeout = durationOrDefault(v, field+".timeout", t.Timeout, DefaultTimeout, MinTimeout, MaxTimeout)
	if !reqlimit.Count(v, field+".accepted_status_codes", len(t.AcceptedStatusCodes), MaxStatusCodes) {
		t.AcceptedStatusCodes = nil // reported; not worth checking one by one
	}
	for i, code := range t.AcceptedStatusCodes {
		if code < 100 || code > 599 {
			v.Add(fmt.Sprintf("%s.accepted_status_codes[%d]", field, i), "must be an HTTP status code (100-599), got %d", code)
		}
	}
	if t.SigningSecret != "" && webhooksign.CheckSecret(t.SigningSecret) != nil {
		v.Add(field+".signing_secret", `must be "whsec_" followed by base64 of 24 to 64 bytes`)
	}
}

func (c *Checker) amqpTarget(v *rpcerr.Violations, field, namespace string, t *registryv1.AmqpTarget, partial bool) {
	if t == nil {
		v.Add(field, "is required")
		return
	}
	if len(t.Exchange) > MaxAMQPName || !utf8.ValidString(t.Exchange) {
		v.Add(field+".exchange", "must be valid UTF-8 of at most %d bytes", MaxAMQPName)
	}
	if len(t.RoutingKey) > MaxAMQPName || !utf8.ValidString(t.RoutingKey) {
		v.Add(field+".routing_key", "must be valid UTF-8 of at most %d bytes", MaxAMQPName)
	}
	if strings.Contains(t.Exchange, "|") {
		v.Add(field+".exchange", "is not a valid AMQP exchange name")
	}
	if t.Exchange == "" && t.RoutingKey == "" {
		v.Add(field+".routing_key", "is required when publishing to the default exchange (it names the queue)")
	} else if f, reason := c.amqp.Refusal(namespace, t.Exchange, t.RoutingKey); reason != "" {
		v.Add(field+"."+f, "%s", reason)
	}
	headers(v, field, t.Headers, t.SecretHeaders, false, partial)
	body(v, field, t.Body, t.BodyFormat)
	if t.ContentType == "" {
		t.ContentType = DefaultContentType
	} else if len(t.ContentType) > MaxAMQPName {
		v.Add(field+".content_type", "must be at most %d bytes", MaxAMQPName)
	}
}

// body checks a target's body at field+".body" and its format: at most
// MaxBody bytes, and a template must parse and its largest rendering (every
// placeholder at its longest value) fit in MaxBody too, so that no attempt
// ever sends more than a literal body could.
func body(v *rpcerr.Violations, field, body string, format registryv1.BodyFormat) {
	if len(body) > MaxBody {
		v.Add(field+".body", "must be at most %d bytes, got %d", MaxBody, len(body))
		return
	}
	switch format {
	case registryv1.BodyFormat_BODY_FORMAT_UNSPECIFIED, registryv1.BodyFormat_BODY_FORMAT_LITERAL:
	case registryv1.BodyFormat_BODY_FORMAT_TEMPLATE:
		t, err := slotinfo.Parse(body)
		switch {
		case err != nil:
			v.Add(field+".body", "%v", err)
		case t.MaxSize() > MaxBody:
			v.Add(field+".body", "as a template may render to %d bytes (each placeholder at its longest value), more than %d", t.MaxSize(), MaxBody)
		}
	default:
		v.Add(field+".body_format", "must be BODY_FORMAT_LITERAL or BODY_FORMAT_TEMPLATE, got %d", int32(format))
	}
}

// headers checks the plain and the secret headers of a target at field;
// partial lets empty secret values through.
func headers(v *rpcerr.Violations, field string, plain, secret map[string]string, isHTTP, partial bool) {
	if n := len(plain) + len(secret); n > MaxHeaders {
		v.Add(field+".headers", "at most %d headers (with secret_headers), got %d", MaxHeaders, n)
		return
	}
	seen := make(map[string]string, len(plain)+len(secret))
	check := func(mapField string, h map[string]string, isSecret bool) {
		for _, name := range sortedKeys(h) {
			path := fmt.Sprintf("%s.%s[%q]", field, mapField, name)
			switch {
			case len(name) > MaxHeaderName || (isHTTP && !headerNamePattern.MatchString(name)) || name == "":
				v.Add(path, "name must be a valid header name of at most %d characters", MaxHeaderName)
			case isHTTP && slices.Contains(forbiddenHeaders, strings.ToLower(name)):
				v.Add(path, "is set by cronmesh and cannot be overridden")
			case slotinfo.IsReservedHeader(name):
				v.Add(path, "is reserved: cronmesh sets the %s* headers", slotinfo.ReservedHeaderPrefix)
			}
			if other, dup := seen[strings.ToLower(name)]; dup {
				v.Add(path, "is also given as %s", other)
			}
			seen[strings.ToLower(name)] = path
			val := h[name]
			switch {
			case len(val) > MaxHeaderValue || strings.ContainsAny(val, "\r\n\x00") || !utf8.ValidString(val):
				v.Add(path, "value must be at most %d bytes of UTF-8 without line breaks", MaxHeaderValue)
			case isSecret && val == "" && !partial:
				v.Add(path, "value is required (an empty value keeps a stored one only on update, for the same destination)")
			}
		}
	}
	check("headers", plain, false)
	check("secret_headers", secret, true)
}

// IsCredentialHeader reports whether name (any case) is a header that
// carries a credential by convention (Authorization, Cookie, X-Api-Key,
// Api-Key, X-Auth-Token, X-Access-Token, Private-Token).
func IsCredentialHeader(name string) bool {
	return slices.Contains(credentialHeaders, strings.ToLower(name))
}

// MoveCredentialHeaders moves every credential header (IsCredentialHeader)
// of t's plain headers into its secret headers, unless the secret ones
// already hold a value of that name (then headers validation reports the
// duplicate); a name they hold with an empty value (kept from the stored
// target) takes the plain header's value.
// A user who put a bearer token in headers expects it to be kept as
// secret as the signing secret.
func MoveCredentialHeaders(t *registryv1.Target) {
	move := func(plain map[string]string, secret *map[string]string) {
		for name, val := range plain {
			if !IsCredentialHeader(name) {
				continue
			}
			if kept, taken := (*secret)[name]; taken && kept != "" {
				continue
			}
			if *secret == nil {
				*secret = map[string]string{}
			}
			(*secret)[name] = val
			delete(plain, name)
		}
	}
	switch k := t.GetKind().(type) {
	case *registryv1.Target_Http:
		if k.Http != nil {
			move(k.Http.Headers, &k.Http.SecretHeaders)
		}
	case *registryv1.Target_Amqp:
		if k.Amqp != nil {
			move(k.Amqp.Headers, &k.Amqp.SecretHeaders)
		}
	}
}

// Redact removes from t, in place, what no read may return: the signing
// secret and the values of the secret headers (their names stay, with
// empty values, so a reader knows they are set and can send the target
// back unchanged). A nil t is fine.
func Redact(t *registryv1.Target) {
	if h := t.GetHttp(); h != nil {
		h.SigningSecret = ""
		for name := range h.SecretHeaders {
			h.SecretHeaders[name] = ""
		}
	}
	if a := t.GetAmqp(); a != nil {
		for name := range a.SecretHeaders {
			a.SecretHeaders[name] = ""
		}
	}
}

// KeepSecrets completes t, in place, with what it omits of stored (the
// target it replaces, secrets included): an empty signing secret becomes
// stored's; with replaceSet false, an empty secret_headers becomes stored's
// whole set; and a secret header with an empty value takes stored's value
// of that name. Stored secret header values are only carried to the same
// destination (HTTP: the URL's scheme, host and port; AMQP: exchange and
// routing key): otherwise it adds a violation at field (the target's path)
// and leaves them out, so that a changed URL can never receive a
// credential meant for another host. A stored target of another kind
// keeps nothing. Call it before Checker.Target.
func KeepSecrets(v *rpcerr.Violations, field string, t, stored *registryv1.Target, replaceSet bool) {
	var (
		secret, storedSecret *map[string]string
		sameDestination      bool
		kind                 string
	)
	switch {
	case t.GetHttp() != nil && stored.GetHttp() != nil:
		h, old := t.GetHttp(), stored.GetHttp()
		if h.SigningSecret == "" {
			h.SigningSecret = old.SigningSecret
		}
		secret, storedSecret, kind = &h.SecretHeaders, &old.SecretHeaders, "http"
		sameDestination = sameOrigin(h.Url, old.Url)
	case t.GetAmqp() != nil && stored.GetAmqp() != nil:
		a, old := t.GetAmqp(), stored.GetAmqp()
		secret, storedSecret, kind = &a.SecretHeaders, &old.SecretHeaders, "amqp"
		sameDestination = a.Exchange == old.Exchange && a.RoutingKey == old.RoutingKey
	default:
		return
	}
	if len(*secret) == 0 && !replaceSet && len(*storedSecret) > 0 {
		*secret = make(map[string]string, len(*storedSecret))
		for name := range *storedSecret {
			(*secret)[name] = ""
		}
	}
	for _, name := range sortedKeys(*secret) {
		if (*secret)[name] != "" {
			continue
		}
		stored, ok := (*storedSecret)[name]
		if !ok {
			continue // Target reports the missing value.
		}
		if !sameDestination {
			v.Add(fmt.Sprintf("%s.%s.secret_headers[%q]", field, kind, name),
				"the destination changed: give the value again (a stored secret header is never sent to another destination)")
			delete(*secret, name)
			continue
		}
		(*secret)[name] = stored
	}
}

// sameOrigin reports whether two URLs have the same scheme, host and port
// (the port defaulted from the scheme). Unparsable URLs are not the same.
func sameOrigin(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	if errA != nil || errB != nil {
		return false
	}
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if strings.EqualFold(u.Scheme, "https") {
			return "443"
		}
		return "80"
	}
	return strings.EqualFold(ua.Scheme, ub.Scheme) && strings.EqualFold(ua.Hostname(), ub.Hostname()) && port(ua) == port(ub)
}

// durationOrDefault returns def when d is unset, and d otherwise, recording a
// violation when d is malformed or outside [lo, hi].
func durationOrDefault(v *rpcerr.Violations, field string, d *durationpb.Duration, def, lo, hi time.Duration) *durationpb.Duration {
	if d == nil {
		return durationpb.New(def)
	}
	if d.CheckValid() != nil {
		v.Add(field, "is not a valid duration")
		return d
	}
	if got := d.AsDuration(); got < lo || got > hi {
		v.Add(field, "must be between %s and %s, got %s", lo, hi, got)
	}
	return d
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
