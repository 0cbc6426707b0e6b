// Package web serves mspd's chat page: a small MSP client in plain HTML,
// JavaScript and CSS that talks to /msp on the page's own host. The files
// are embedded, so the page needs no build step and works offline.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"time"
)

//go:embed index.html app.js style.css
var files embed.FS

// csp allows the page its own files, inline data images (the favicon) and
// WebSocket connections to its own host, and nothing else.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// asset is one embedded file, ready to serve.
type asset struct {
	name        string
	body        []byte
	contentType string
	etag        string
}

// assets maps request paths to files.
var assets = func() map[string]asset {
	load := func(name, contentType string) asset {
		body, err := files.ReadFile(name)
		if err != nil {
			panic("web: " + err.Error()) // embedded: cannot happen
		}
		sum := sha256.Sum256(body)
		return asset{name: name, body: body, contentType: contentType, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	index := load("index.html", "text/html; charset=utf-8")
	return map[string]asset{
		"/":           index,
		"/index.html": index,
		"/app.js":     load("app.js", "text/javascript; charset=utf-8"),
		"/style.css":  load("style.css", "text/css; charset=utf-8"),
	}
}()

// Handler serves the chat page at / (and its script and style sheet). Any
// other path is not found. Responses carry an ETag and Cache-Control:
// no-cache, so browsers revalidate and pick up a new mspd at once.
func Handler() http.Handler {
	return http.HandlerFunc(serve)
}

func serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	a, ok := assets[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	// The page URL may carry ?token=: keep it out of Referer headers.
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", csp)
	http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.body))
}
