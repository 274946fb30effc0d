package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docScrape is the Prometheus scrape config docs/cli.md gives for
// [api] tcp with a token.
type docScrape struct {
	scheme, path, authType, credFile, target string
}

// scrapeConfigOfDocs reads the scrape config out of docs/cli.md.
func scrapeConfigOfDocs(t *testing.T) docScrape {
	t.Helper()
	b, err := os.ReadFile("../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```yaml\n(scrape_configs:.*?)```").FindSubmatch(b)
	if block == nil {
		t.Fatal("docs/cli.md has no Prometheus scrape_configs block")
	}
	field := func(name string) string {
		m := regexp.MustCompile(`(?m)^\s*-?\s*` + name + `:\s*(\S+)`).FindSubmatch(block[1])
		if m == nil {
			t.Fatalf("the scrape config in docs/cli.md has no %s:\n%s", name, block[1])
		}
		return strings.Trim(string(m[1]), `"[]`)
	}
	return docScrape{scheme: field("scheme"), path: field("metrics_path"), authType: field("type"),
		credFile: field("credentials_file"), target: field("targets")}
}

// A Prometheus configured as docs/cli.md says scrapes the daemon's
// metrics over [api] tcp with the token from a file; without the token
// it is refused.
func TestPrometheusScrapeAsDocumented(t *testing.T) {
	sc := scrapeConfigOfDocs(t)
	if sc.scheme != "http" || sc.authType != "Bearer" || sc.path != "/metrics" {
		t.Fatalf("scrape config of the docs: %+v", sc)
	}
	const token = "0123456789abcdef-e2e-token"
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	base, root := newRoot(t, func(root string) { write(t, filepath.Join(root, "a"), "a") })
	write(t, filepath.Join(base, "config", "annexd", "annexd.toml"), fmt.Sprintf("[api]\ntcp = %q\ntoken = %q\n", addr, token))
	d := spawn(t, annexdRun{base: base, roots: []string{root}})
	d.waitIdle()
	// The credentials file holds the token alone, with a newline as an
	// editor leaves it; Prometheus trims it.
	cred := filepath.Join(base, filepath.Base(sc.credFile))
	write(t, cred, token+"\n")
	b, err := os.ReadFile(cred)
	if err != nil {
		t.Fatal(err)
	}
	url := sc.scheme + "://" + addr + sc.path
	get := func(auth string) (int, string) {
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := get(sc.authType + " " + strings.TrimSpace(string(b)))
	if code != 200 || !strings.Contains(body, "annexd_indexer_files_seen_total") || !strings.Contains(body, "annexd_audit_problems") {
		t.Fatalf("scrape with the token: %d\n%.500s", code, body)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("scrape without the token: %d, want 401", code)
	}
}
