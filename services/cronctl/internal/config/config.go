// Package config resolves cronctl's settings from flags, the environment, a
// config file and defaults, in that order of precedence.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cronmesh/cronmesh/libs/tlsconfig"
)

// Defaults are the endpoints of `make dev`, so that cronctl works against a
// local mesh with nothing configured but the API key.
const (
	DefaultRegistryURL   = "http://127.0.0.1:8081"
	DefaultTriggerURL    = "http://127.0.0.1:8082"
	DefaultDispatcherURL = "http://127.0.0.1:8083"
	DefaultHistoryURL    = "http://127.0.0.1:8084"
	DefaultAlertingURL   = "http://127.0.0.1:8085"
	DefaultOutput        = "table"
	DefaultTimeout       = 30 * time.Second
)

// Environment variables read by Resolve.
const (
	EnvConfig        = "CRONMESH_CONFIG"
	EnvRegistryURL   = "CRONMESH_REGISTRY_URL"
	EnvTriggerURL    = "CRONMESH_TRIGGER_URL"
	EnvDispatcherURL = "CRONMESH_DISPATCHER_URL"
	EnvHistoryURL    = "CRONMESH_HISTORY_URL"
	EnvAlertingURL   = "CRONMESH_ALERTING_URL"
	EnvAPIKey        = "CRONMESH_API_KEY"
	EnvOutput        = "CRONMESH_OUTPUT"
	EnvTimeout       = "CRONMESH_TIMEOUT"
	EnvCAFile        = "CRONMESH_CA_FILE"
	EnvClientCert    = "CRONMESH_CLIENT_CERT"
	EnvClientKey     = "CRONMESH_CLIENT_KEY"
)

// Redacted stands in for the API key wherever the configuration is shown.
const Redacted = "<redacted>"

// Config is the resolved configuration of one cronctl invocation.
type Config struct {
	RegistryURL   string
	TriggerURL    string
	DispatcherURL string
	HistoryURL    string
	AlertingURL   string
	// APIKey is sent as "Authorization: Bearer <key>". It is never printed:
	// String and View redact it, and the CLI's writers mask it.
	APIKey  string
	Output  string
	Timeout time.Duration
	// CAFile is the PEM CA that https:// endpoints' certificates must chain
	// to; empty: the system's CAs.
	CAFile string
	// ClientCert and ClientKey are the PEM certificate and key presented to
	// services that require one (mutual TLS); both or neither.
	ClientCert string
	ClientKey  string
	// File is the config file that was read; empty when none was.
	File string
	// Sources names where each setting came from (flag, env, file or
	// default), keyed by the file's key names, for `config view`.
	Sources map[string]string
}

// File is the config file's shape (YAML or JSON, camelCase keys).
type File struct {
	RegistryURL   string `json:"registryUrl,omitempty"`
	TriggerURL    string `json:"triggerUrl,omitempty"`
	DispatcherURL string `json:"dispatcherUrl,omitempty"`
	HistoryURL    string `json:"historyUrl,omitempty"`
	AlertingURL   string `json:"alertingUrl,omitempty"`
	APIKey        string `json:"apiKey,omitempty"`
	Output        string `json:"output,omitempty"`
	Timeout       string `json:"timeout,omitempty"`
	CAFile        string `json:"caFile,omitempty"`
	ClientCert    string `json:"clientCert,omitempty"`
	ClientKey     string `json:"clientKey,omitempty"`
}

// Flags are the values given on the command line; an empty field was not
// given. ConfigPath is --config.
type Flags struct {
	ConfigPath    string
	RegistryURL   string
	TriggerURL    string
	DispatcherURL string
	HistoryURL    string
	AlertingURL   string
	APIKey        string
	Output        string
	Timeout       string
	CAFile        string
	ClientCert    string
	ClientKey     string
}

// Sources of a setting.
const (
	SourceFlag    = "flag"
	SourceEnv     = "env"
	SourceFile    = "file"
	SourceDefault = "default"
)

// Resolve builds the Config: flags win over the environment, the
// environment over the config file, the file over the defaults. The config
// file is flags.ConfigPath, else $CRONMESH_CONFIG, else
// <home>/.config/cronmesh/cronctl.yaml; a missing default file is not an
// error, a missing named one is. Errors never contain the API key.
func Resolve(flags Flags, lookupEnv func(string) (string, bool), home string) (Config, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	env := func(name string) string { v, _ := lookupEnv(name); return v }

	path, explicit := flags.ConfigPath, true
	if path == "" {
		path = env(EnvConfig)
	}
	if path == "" && home != "" {
		path, explicit = filepath.Join(home, ".config", "cronmesh", "cronctl.yaml"), false
	}
	var file File
	cfg := Config{Sources: map[string]string{}}
	if path != "" {
		raw, err := os.ReadFile(path)
		switch {
		case err == nil:
			// UnmarshalStrict catches misspelled keys, which would otherwise
			// silently fall back to a default endpoint.
			if err := yaml.UnmarshalStrict(raw, &file); err != nil {
				return Config{}, fmt.Errorf("config file %s: %w", path, err)
			}
			cfg.File = path
		case errors.Is(err, fs.ErrNotExist) && !explicit:
		default:
			return Config{}, fmt.Errorf("config file: %w", err)
		}
	}

	pick := func(key, flag, envName, fromFile, def string) string {
		switch {
		case flag != "":
			cfg.Sources[key] = SourceFlag
			return flag
		case env(envName) != "":
			cfg.Sources[key] = SourceEnv
			return env(envName)
		case fromFile != "":
			cfg.Sources[key] = SourceFile
			return fromFile
		default:
			cfg.Sources[key] = SourceDefault
			return def
		}
	}
	cfg.RegistryURL = pick("registryUrl", flags.RegistryURL, EnvRegistryURL, file.RegistryURL, DefaultRegistryURL)
	cfg.TriggerURL = pick("triggerUrl", flags.TriggerURL, EnvTriggerURL, file.TriggerURL, DefaultTriggerURL)
	cfg.DispatcherURL = pick("dispatcherUrl", flags.DispatcherURL, EnvDispatcherURL, file.DispatcherURL, DefaultDispatcherURL)
	cfg.HistoryURL = pick("historyUrl", flags.HistoryURL, EnvHistoryURL, file.HistoryURL, DefaultHistoryURL)
	cfg.AlertingURL = pick("alertingUrl", flags.AlertingURL, EnvAlertingURL, file.AlertingURL, DefaultAlertingURL)
	cfg.APIKey = pick("apiKey", flags.APIKey, EnvAPIKey, file.APIKey, "")
	cfg.Output = pick("output", flags.Output, EnvOutput, file.Output, DefaultOutput)
	timeout := pick("timeout", flags.Timeout, EnvTimeout, file.Timeout, DefaultTimeout.String())
	cfg.CAFile = pick("caFile", flags.CAFile, EnvCAFile, file.CAFile, "")
	cfg.ClientCert = pick("clientCert", flags.ClientCert, EnvClientCert, file.ClientCert, "")
	cfg.ClientKey = pick("clientKey", flags.ClientKey, EnvClientKey, file.ClientKey, "")

	var errs []error
	var err error
	if cfg.Timeout, err = time.ParseDuration(timeout); err != nil || cfg.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout %q (from %s): want a positive Go duration such as 30s", timeout, cfg.Sources["timeout"]))
	}
	switch cfg.Output {
	case "table", "json", "yaml":
	default:
		errs = append(errs, fmt.Errorf("output %q (from %s): want table, json or yaml", cfg.Output, cfg.Sources["output"]))
	}
	for _, u := range []struct{ key, url string }{{"registryUrl", cfg.RegistryURL}, {"triggerUrl", cfg.TriggerURL}, {"dispatcherUrl", cfg.DispatcherURL},
		{"historyUrl", cfg.HistoryURL}, {"alertingUrl", cfg.AlertingURL}} {
		if !strings.HasPrefix(u.url, "http://") && !strings.HasPrefix(u.url, "https://") {
			errs = append(errs, fmt.Errorf("%s %q (from %s): want an http:// or https:// URL", u.key, u.url, cfg.Sources[u.key]))
		}
	}
	if (cfg.ClientCert == "") != (cfg.ClientKey == "") {
		errs = append(errs, fmt.Errorf("clientCert (from %s) and clientKey (from %s) go together: give both or neither",
			cfg.Sources["clientCert"], cfg.Sources["clientKey"]))
	}
	return cfg, errors.Join(errs...)
}

// TLS is the TLS configuration of calls to https:// endpoints.
func (c Config) TLS() tlsconfig.Client {
	return tlsconfig.Client{CAFile: c.CAFile, CertFile: c.ClientCert, KeyFile: c.ClientKey}
}

// View is the configuration as `config view` shows it: every setting with
// its source, the API key replaced by Redacted (or "" when unset).
func (c Config) View() File {
	key := ""
	if c.APIKey != "" {
		key = Redacted
	}
	return File{
		RegistryURL:   c.RegistryURL,
		TriggerURL:    c.TriggerURL,
		DispatcherURL: c.DispatcherURL,
		HistoryURL:    c.HistoryURL,
		AlertingURL:   c.AlertingURL,
		APIKey:        key,
		Output:        c.Output,
		Timeout:       cmp.Or(c.Timeout, DefaultTimeout).String(),
		CAFile:        c.CAFile,
		ClientCert:    c.ClientCert,
		ClientKey:     c.ClientKey,
	}
}

// String is View in one line, so that printing a Config by accident
// (%v in a log or an error) cannot leak the key.
func (c Config) String() string { return fmt.Sprintf("%+v", c.View()) }

// GoString redacts like String, for %#v.
func (c Config) GoString() string { return c.String() }
