package ratelimit

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cronmesh/cronmesh/libs/quota"
)

// Defaults of the flags.
var (
	// DefaultRate is every key's rate unless its namespace has its own.
	DefaultRate = Rate{PerSecond: 50, Burst: 100}
	// DefaultMaxKeys is how many keys' buckets a process keeps.
	DefaultMaxKeys = 10_000
)

// Rate is a token bucket's refill rate and size. The zero Rate is
// unlimited.
type Rate struct {
	// PerSecond is the sustained requests per second.
	PerSecond float64
	// Burst is how many requests may arrive at once after an idle time.
	Burst int
}

// Unlimited reports whether the rate admits everything.
func (r Rate) Unlimited() bool { return r.PerSecond == 0 }

// String is "PerSecond:Burst", or "0" when unlimited.
func (r Rate) String() string {
	if r.Unlimited() {
		return "0"
	}
	return strconv.FormatFloat(r.PerSecond, 'f', -1, 64) + ":" + strconv.Itoa(r.Burst)
}

// ParseRate reads "PerSecond:Burst" (e.g. "50:100" or "0.5:5"), or "0" or
// "off" for unlimited. PerSecond must be positive and finite, Burst at
// least 1.
func ParseRate(v string) (Rate, error) {
	v = strings.TrimSpace(v)
	if v == "0" || v == "off" {
		return Rate{}, nil
	}
	perSecond, burst, ok := strings.Cut(v, ":")
	if !ok {
		return Rate{}, fmt.Errorf("%q: want requests-per-second:burst (e.g. 50:100), or 0 or off for no limit", v)
	}
	r := Rate{}
	var err error
	if r.PerSecond, err = strconv.ParseFloat(perSecond, 64); err != nil || r.PerSecond <= 0 || math.IsInf(r.PerSecond, 0) {
		return Rate{}, fmt.Errorf("%q: requests per second must be a number > 0", v)
	}
	if r.Burst, err = strconv.Atoi(burst); err != nil || r.Burst < 1 {
		return Rate{}, fmt.Errorf("%q: burst must be a whole number >= 1", v)
	}
	return r, nil
}

// rateFlag is a flag.Value for a Rate.
type rateFlag Rate

func (f *rateFlag) String() string {
	if f == nil {
		return ""
	}
	return Rate(*f).String()
}

func (f *rateFlag) Set(v string) error {
	r, err := ParseRate(v)
	if err != nil {
		return err
	}
	*f = rateFlag(r)
	return nil
}

// NamespaceRates is a flag.Value of per-namespace rates written
// "namespace=PerSecond:Burst,..." (a rate of 0 or off lifts the limit for
// that namespace). Set replaces the whole map.
type NamespaceRates map[string]Rate

// String lists the rates sorted by namespace; safe on a nil receiver.
func (n *NamespaceRates) String() string {
	if n == nil {
		return ""
	}
	items := make([]string, 0, len(*n))
	for _, ns := range slices.Sorted(maps.Keys(*n)) {
		items = append(items, ns+"="+(*n)[ns].String())
	}
	return strings.Join(items, ",")
}

// Set replaces the rates with those of v.
func (n *NamespaceRates) Set(v string) error {
	parsed := NamespaceRates{}
	err := quota.ParseNamespaceList(v, func(namespace, value string) error {
		r, err := ParseRate(value)
		parsed[namespace] = r
		return err
	})
	if err != nil {
		return err
	}
	*n = parsed
	return nil
}

// Config is the rate limit of a service's API. The zero Config limits
// nothing (tests and in-process servers); Register sets the defaults.
type Config struct {
	// Default is each key's rate (--rate-limit, CRONMESH_RATE_LIMIT).
	Default Rate
	// Namespaces overrides Default for the keys of the namespaces it names
	// (--rate-limit-namespaces, CRONMESH_RATE_LIMIT_NAMESPACES).
	Namespaces NamespaceRates
	// MaxKeys caps the buckets kept in memory (--rate-limit-keys,
	// CRONMESH_RATE_LIMIT_KEYS); 0 means DefaultMaxKeys.
	MaxKeys int
}

// Register adds the rate limit flags to fs, with their defaults.
func (c *Config) Register(fs *flag.FlagSet) {
	c.Default = DefaultRate
	fs.Var((*rateFlag)(&c.Default), "rate-limit",
		"each API key's requests per second and burst, as rate:burst (e.g. 50:100); 0 or off: no limit. Counted per replica")
	fs.Var(&c.Namespaces, "rate-limit-namespaces",
		"per-namespace overrides of --rate-limit, comma separated, each namespace=rate:burst (or namespace=off)")
	fs.IntVar(&c.MaxKeys, "rate-limit-keys", DefaultMaxKeys,
		"most API keys whose token buckets a process keeps (the least recently used is evicted beyond)")
}

// Validate reports a Config the Limiter cannot honour.
func (c Config) Validate() error {
	var errs []error
	if c.MaxKeys < 0 {
		errs = append(errs, errors.New("rate-limit-keys must be >= 0"))
	}
	for ns, r := range c.Namespaces {
		if !r.Unlimited() && r.Burst < 1 {
			errs = append(errs, fmt.Errorf("rate-limit-namespaces: %s: burst must be >= 1", ns))
		}
	}
	if !c.Default.Unlimited() && c.Default.Burst < 1 {
		errs = append(errs, errors.New("rate-limit: burst must be >= 1"))
	}
	return errors.Join(errs...)
}

// rateFor returns namespace's rate.
func (c Config) rateFor(namespace string) Rate {
	if r, ok := c.Namespaces[namespace]; ok {
		return r
	}
	return c.Default
}

// Unlimited reports whether the Config limits no namespace at all, so no
// interceptor is needed.
func (c Config) Unlimited() bool {
	if !c.Default.Unlimited() {
		return false
	}
	for _, r := range c.Namespaces {
		if !r.Unlimited() {
			return false
		}
	}
	return true
}
