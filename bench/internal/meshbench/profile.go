package meshbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cronmesh/cronmesh/bench/internal/pprofsave"
)

// profile is one service's CPU profile and its `go tool pprof -top`.
type profile struct {
	service string
	path    string
	top     string // the summary lines of pprof -top, trimmed
	err     error
}

// startProfiles takes a CPU profile of every service for secs seconds, in
// parallel, and returns a function that waits for them. It only fetches
// the services' pprof endpoints into files: the summaries (summarise) are
// for after the measured window, since `go tool pprof` is heavy enough to
// stall a two-core machine and would be measured with the mesh.
func (e *env) startProfiles(ctx context.Context, label string, secs int) func() []profile {
	procs := e.services()
	out := make([]profile, len(procs))
	dir := filepath.Join(e.dir, "profiles")
	_ = os.MkdirAll(dir, 0o755)
	var wg sync.WaitGroup
	for i, p := range procs {
		out[i] = profile{service: p.Name, path: filepath.Join(dir, fmt.Sprintf("%s-%s-cpu.pprof", label, p.Name))}
		wg.Go(func() {
			out[i].err = pprofsave.Save(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", p.URL, secs), out[i].path, time.Duration(secs+30)*time.Second)
		})
	}
	return func() []profile {
		wg.Wait()
		return out
	}
}

// summarise runs top on every profile taken, one after the other. Call it
// once the measured window is over.
func summarise(ctx context.Context, ps []profile) {
	for i := range ps {
		if ps[i].err == nil {
			ps[i].top, ps[i].err = top(ctx, ps[i].path)
		}
	}
}

// top runs `go tool pprof -top` on a profile, writes the whole output to
// path's .txt and returns the header and the first 15 functions.
func top(ctx context.Context, path string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=40", path).Output()
	if err != nil {
		return "", fmt.Errorf("go tool pprof -top %s: %w", path, err)
	}
	if err := os.WriteFile(strings.TrimSuffix(path, ".pprof")+".txt", out, 0o644); err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	var keep []string
	body := 0
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "File:"), strings.HasPrefix(l, "Build ID:"), strings.HasPrefix(l, "Type:"), strings.HasPrefix(l, "Time:"):
			continue
		case strings.Contains(l, "flat%"):
			keep = append(keep, l)
			body = 1
		case body > 0:
			if body > 15 {
				continue
			}
			keep = append(keep, l)
			body++
		default:
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n"), nil
}
