// Package pprofsave downloads a profile from a service's /debug/pprof
// endpoint (served with --pprof) into a file, for the benchmarks that
// profile the processes they measure.
package pprofsave

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// Save GETs url (e.g. http://host:port/debug/pprof/profile?seconds=30) and
// writes the body to path. timeout bounds the whole download, so it must
// exceed a CPU profile's seconds.
func Save(ctx context.Context, url, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
