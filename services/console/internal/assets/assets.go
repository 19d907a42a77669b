// Package assets serves the console's single-page application: the files
// vite builds into dist/, embedded into the binary at compile time.
package assets

import (
	"embed"
	"errors"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// dist holds the built SPA, or only the placeholder of a fresh clone (`make
// build` runs vite before go build); all: keeps the placeholder, so the
// embed compiles either way.
//
//go:embed all:dist
var dist embed.FS

// Built returns the embedded assets, rooted at dist/.
func Built() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		// fs.Sub fails only on an invalid path, and "dist" is valid.
		panic(err)
	}
	return sub
}

// NotBuiltMessage is the body of every page when the binary was compiled
// without the SPA.
const NotBuiltMessage = "console assets not built: run make build"

// contentSecurityPolicy keeps the page to its own origin: scripts and API
// calls go nowhere else, and nothing frames it (an API key is typed into
// it). Inline styles are allowed because the component library sets style
// attributes.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"

// Handler serves files from files: a path naming a file serves it (vite's
// hashed files under assets/ cached for a year), any other GET or HEAD
// serves index.html, so the SPA's own routes survive a reload. Without
// index.html (a binary built without `make build`) every page answers 503
// with NotBuiltMessage rather than an empty page.
func Handler(files fs.FS) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		index, err := fs.ReadFile(files, "index.html")
		if err != nil {
			http.Error(w, NotBuiltMessage, http.StatusServiceUnavailable)
			return
		}
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name != "" && name != "index.html" {
			if info, err := fs.Stat(files, name); err == nil && !info.IsDir() {
				if strings.HasPrefix(name, "assets/") {
					h.Set("Cache-Control", "public, max-age=31536000, immutable")
				}
				http.ServeFileFS(w, r, files, name)
				return
			} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
				http.Error(w, "internal error", http.StatusInternalServerError)
				return
			}
			// A missing file under assets/ is a stale page asking for an old
			// build's bundle: index.html in its place would be run as
			// JavaScript.
			if strings.HasPrefix(name, "assets/") {
				http.NotFound(w, r)
				return
			}
		}
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(index)
	})
}
