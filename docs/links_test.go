// Package docs holds mspd's documentation; its test checks that the
// relative links of every Markdown page in the repository's root and in
// docs/ lead to a file that exists.
package docs

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// link matches a Markdown link or image target: [text](target).
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestRelativeLinksResolve: a page that moves or is renamed fails here,
// not in a reader's browser.
func TestRelativeLinksResolve(t *testing.T) {
	pages, _ := filepath.Glob("../*.md")
	more, _ := filepath.Glob("*.md")
	pages = append(pages, more...)
	if len(pages) < 5 {
		t.Fatalf("found only %v", pages)
	}
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := fenced.ReplaceAllString(string(b), "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			u, err := url.Parse(target)
			if err != nil || u.Scheme != "" || u.Host != "" || u.Path == "" {
				continue // absolute, an anchor in the page, or not a URL
			}
			path := filepath.Join(filepath.Dir(page), filepath.FromSlash(u.Path))
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which does not exist", page, target)
			}
		}
	}
}

// fenced matches fenced code blocks, whose brackets are not links.
var fenced = regexp.MustCompile("(?s)```.*?```")
