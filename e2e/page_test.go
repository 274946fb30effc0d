package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/annexd/annexd/internal/loopfs"
)

// The web page (annexctl ui) in a real browser: Debian's chromium,
// driven by chromedp, against the real daemon on an XFS image with
// reflink. One browser runs every check, in a few seconds each.

// updateShotsEnv, set to 1, saves the page's screenshots in docs/.
const updateShotsEnv = "ANNEXD_UPDATE_SCREENSHOTS"

// chromium returns the browser's path, and fails the test with the
// install hint when it is missing: scripts/test.sh installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium is missing: the page's tests drive a real browser; install it with `apt-get install chromium` (scripts/test.sh installs it)")
	return ""
}

// browser is a headless chromium; what the page writes to its console
// as an error, and exceptions, are gathered in errs.
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	exe := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 800),
		chromedp.UserDataDir(t.TempDir()),
		// Chromium makes a folder for its singleton socket in TMPDIR
		// whatever the profile's folder: one for each run left in /tmp.
		chromedp.Env("TMPDIR="+t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	b := &browser{ctx: ctx}
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium (%s): %v", exe, err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if (m.Type == chromedp.ConsoleError || m.IsException()) && !expected404(m) {
				b.note(m.String() + " " + m.Source + " " + m.URL)
			}
		}
	}()
	return b
}

// expected404 is a failed load the page expects and explains: a part
// the daemon runs without (no hub).
func expected404(m chromedp.ConsoleMessage) bool {
	return m.Source == "network" && strings.Contains(m.URL, "/v1/hub/")
}

func (b *browser) note(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = append(b.errs, s)
}

// checkClean fails the test for every console error seen so far.
func (b *browser) checkClean(t *testing.T, when string) {
	t.Helper()
	time.Sleep(100 * time.Millisecond) // the console's events come apart from the answers
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		t.Errorf("%s: the page logged an error: %s", when, e)
	}
	b.errs = nil
}

// run runs the steps, each within a bound.
func (b *browser) run(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval returns the value of a JavaScript expression.
func (b *browser) eval(t *testing.T, js string, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](js))
	if err == nil {
		err = json.Unmarshal(v, out)
	}
	if err != nil {
		t.Fatalf("eval %s: %v", js, err)
	}
}

// waitJS waits until the expression is true.
func (b *browser) waitJS(t *testing.T, what, js string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		b.eval(t, "!!("+js+")", &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var body string
			b.eval(t, "document.body.innerText", &body)
			t.Fatalf("%s: %s never held; the page says:\n%s", what, js, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// click clicks the first button labelled text in the table row that
// holds row.
func (b *browser) click(t *testing.T, table, row, text string) {
	t.Helper()
	js := `(() => { for (const tr of document.querySelectorAll("#` + table + ` tbody tr")) {
		if (!tr.textContent.includes(` + jsString(row) + `)) continue;
		for (const b of tr.querySelectorAll("button")) if (b.textContent.startsWith(` + jsString(text) + `)) { b.click(); return true; } }
		return false; })()`
	var ok bool
	b.eval(t, js, &ok)
	if !ok {
		var body string
		b.eval(t, "document.body.innerText", &body)
		t.Fatalf("no %q button in a row of #%s with %q; the page says:\n%s", text, table, row, body)
	}
}

func jsString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// pageURL asks annexctl ui for the page's address.
func pageURL(t *testing.T, d *daemon) string {
	t.Helper()
	r := d.ctl("", "ui", "--no-open")
	u := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(u, "http://127.0.0.1:") || !strings.Contains(u, "?token=") {
		t.Fatalf("annexctl ui: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if again := strings.TrimSpace(d.ctl("", "ui", "--no-open").stdout); again != u {
		t.Errorf("a second annexctl ui answers %q, the first %q: one page per start", again, u)
	}
	return u
}

// The page's guard, without a browser: no token, a foreign Host, and a
// change with only the cookie or from another origin are refused.
func checkPageGuard(t *testing.T, u string) {
	t.Helper()
	pu, _ := url.Parse(u)
	tok := pu.Query().Get("token")
	base := "http://" + pu.Host
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, hdr map[string]string) int {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(""))
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	cookie := "annexd_page_" + pu.Port() + "=" + tok
	for _, c := range []struct {
		what, method, path string
		hdr                map[string]string
		want               int
	}{
		{"no token", "GET", "/v1/status", nil, 403},
		{"no token, the page", "GET", "/", nil, 403},
		{"a wrong token", "GET", "/?token=0123456789abcdef", nil, 403},
		{"the token", "GET", "/?token=" + tok, nil, 303},
		{"the cookie", "GET", "/v1/status", map[string]string{"Cookie": cookie}, 200},
		{"the header", "GET", "/v1/tree", map[string]string{"X-Annexd-Token": tok}, 200},
		{"a rebound name", "GET", "/v1/status", map[string]string{"X-Annexd-Token": tok, "Host": "evil.example:" + pu.Port()}, 403},
		{"a change with the cookie only", "POST", "/v1/audit/pause", map[string]string{"Cookie": cookie}, 403},
		{"a change from another site", "POST", "/v1/audit/pause", map[string]string{"X-Annexd-Token": tok, "Origin": "http://evil.example"}, 403},
		{"a change sent cross-site", "POST", "/v1/audit/pause", map[string]string{"X-Annexd-Token": tok, "Sec-Fetch-Site": "cross-site"}, 403},
		{"a change from the page", "POST", "/v1/audit/resume", map[string]string{"X-Annexd-Token": tok, "Origin": base, "Sec-Fetch-Site": "same-origin"}, 200},
	} {
		if got := do(c.method, c.path, c.hdr); got != c.want {
			t.Errorf("%s: %s %s answered %d, want %d", c.what, c.method, c.path, got, c.want)
		}
	}
}

func TestPage(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	fs := loopfs.New(t, loopfs.XFS, loopfs.Options{Size: 300 << 20})
	// A root named as a person's home, so the screenshots in docs/ look
	// like one.
	root := fs.Path("home/alex")
	const size = 4 << 20
	writeRandom(t, filepath.Join(root, "photos", "a.raw"), 1, size)
	writeRandom(t, filepath.Join(root, "backup", "a.raw"), 1, size)
	writeRandom(t, filepath.Join(root, "big", "unique.bin"), 2, 6<<20)
	writeAged(t, filepath.Join(root, "docs", "rot.bin"), 3, 64<<10)
	writeAged(t, filepath.Join(root, "docs-copy", "rot.bin"), 3, 64<<10)
	d := startOn(t, dedupBase(t, auditConf), root)
	// One pass of the audit, so the page has a history to draw.
	if code, run := auditRun(t, d); code != 0 || run.Counts["ok"] != 5 {
		t.Fatalf("the first audit run: exit %d, %+v", code, run)
	}
	u := pageURL(t, d)
	checkPageGuard(t, u)

	// The treemap draws the real tree, and a table says the same.
	b.run(t, "open the page", chromedp.Navigate(u))
	b.waitJS(t, "treemap", `document.querySelectorAll("#treemap g").length >= 4`)
	b.waitJS(t, "table", `document.querySelector("#tree-table tbody").textContent.includes("photos")`)
	var labels []string
	b.eval(t, `[...document.querySelectorAll("#treemap g")].map(g => g.getAttribute("aria-label"))`, &labels)
	if len(labels) < 4 || !strings.HasPrefix(labels[0], "big, 6.0 MiB") || !anyPrefix(labels, "photos, 4.0 MiB, 1 files, 4.0 MiB reclaimable") {
		t.Errorf("treemap boxes %q: want big first (6 MiB), photos with its 4 MiB reclaimable", labels)
	}
	var addr string
	b.eval(t, "location.href", &addr)
	if strings.Contains(addr, "token=") {
		t.Errorf("the token stays in the address bar: %s", addr)
	}
	// Keyboard: Enter opens the focused box's folder, Backspace goes up.
	b.run(t, "keyboard", chromedp.Focus(chromedp.CSS(`#treemap g[tabindex="0"]`)), chromedp.KeyEvent("\r"))
	b.waitJS(t, "drill down", `document.querySelector("#crumbs [aria-current]").textContent.startsWith("big")`)
	b.run(t, "keyboard", chromedp.Focus(chromedp.CSS(`#treemap g[tabindex="0"]`)), chromedp.KeyEvent("\b"))
	b.waitJS(t, "up again", `document.querySelector("#crumbs [aria-current]").textContent.startsWith(`+jsString(root)+`)`)
	b.waitJS(t, "the no-hub reason", `document.querySelector("#machines-msg").textContent.includes("[publish] hub")`)
	checkHistory(t, b, 1, "0")
	b.checkClean(t, "first paint")
	shots(t, b)

	// "Free this" on the duplicate folders: the plan first, then the run.
	b.waitJS(t, "duplicate folders", `document.querySelector("#dirs-table tbody").textContent.includes("backup")`)
	free := fs.Free(t)
	b.click(t, "dirs-table", "backup", "Free this")
	b.waitJS(t, "the plan", `document.querySelector("#confirm").open && document.querySelector("#plan-summary")`)
	var plan string
	b.eval(t, `document.querySelector("#plan-summary").textContent`, &plan)
	if !strings.Contains(plan, "1 files in 1 groups") || !strings.Contains(plan, "freeing about 4.0 MiB") {
		t.Errorf("the plan says %q", plan)
	}
	if got := fs.Free(t) - free; got > size/2 {
		t.Errorf("the plan alone freed %d bytes", got)
	}
	b.run(t, "confirm", chromedp.Click(chromedp.CSS("#confirm-ok")))
	b.waitJS(t, "the run", `document.querySelector("#confirm-done")`)
	var done string
	b.eval(t, `document.querySelector("#confirm-done").textContent`, &done)
	if !strings.HasPrefix(done, "Freed 4.0 MiB: 1 of 1 files done") {
		t.Errorf("after the run the page says %q", done)
	}
	if got, want := fs.Free(t)-free, int64(size*99/100); got < want {
		t.Errorf("the file system gained %d free bytes, want at least %d", got, want)
	}
	b.run(t, "close", chromedp.Click(chromedp.CSS("#confirm-cancel")))
	b.checkClean(t, "free this")

	t.Run("heal", func(t *testing.T) { pageHeal(t, b, d, fs, root, u) })
}

func anyPrefix(list []string, p string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// shots takes the page at 1280×800 and 390×844, checks the key elements
// are there and fit, and saves them in docs/ when asked.
func shots(t *testing.T, b *browser) {
	t.Helper()
	for _, s := range []struct {
		w, h int64
		file string
	}{{1280, 800, "page-1280.png"}, {390, 844, "page-390.png"}} {
		b.run(t, "viewport", chromedp.EmulateViewport(s.w, s.h))
		b.waitJS(t, "redraw", `document.querySelector("#treemap").getBoundingClientRect().width <= `+itoa(s.w))
		time.Sleep(200 * time.Millisecond) // the treemap redraws 100 ms after a resize
		var seen struct {
			Boxes, Rows, Headings int
			TreeW, ScrollW        float64
		}
		b.eval(t, `({boxes: document.querySelectorAll("#treemap g").length,
			rows: document.querySelectorAll("#tree-table tbody tr").length,
			headings: [...document.querySelectorAll("h2")].filter(h => h.getBoundingClientRect().width > 0).length,
			treeW: document.querySelector("#treemap").getBoundingClientRect().width,
			scrollW: document.documentElement.scrollWidth})`, &seen)
		if seen.Boxes < 4 || seen.Rows < 4 || seen.Headings < 4 || seen.TreeW < float64(s.w)/3 || seen.ScrollW > float64(s.w) {
			t.Errorf("at %d×%d: %+v: want the treemap's boxes, its table, the four sections, and nothing wider than the screen", s.w, s.h, seen)
		}
		png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if len(png) < 10000 {
			t.Errorf("the screenshot at %d×%d has %d bytes", s.w, s.h, len(png))
		}
		if os.Getenv(updateShotsEnv) == "1" {
			if err := os.WriteFile(filepath.Join("..", "docs", s.file), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	b.run(t, "viewport", chromedp.EmulateViewport(1280, 800))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// checkHistory checks the audit's history: a bar and a table row a pass,
// the newest row first with its problems and a coverage of 100% (every
// file was verified within the schedule).
func checkHistory(t *testing.T, b *browser, passes int, problems string) {
	t.Helper()
	b.waitJS(t, "the audit's history", `document.querySelectorAll("#history rect").length === `+strconv.Itoa(passes))
	var rows [][]string
	b.eval(t, `[...document.querySelectorAll("#history-table tbody tr")].map(r => [...r.cells].map(c => c.textContent))`, &rows)
	if len(rows) != passes || len(rows[0]) != 4 || rows[0][2] != problems || rows[0][3] != "100.0%" {
		t.Errorf("the history's table %q: want %d passes, the newest with %s problems and 100.0%% coverage", rows, passes, problems)
	}
}

// pageHeal rots a file that has a verified copy, lets the audit find it,
// and heals it from the page: the plan names the copy and changes
// nothing, the heal restores the file's SHA-256 and says so.
func pageHeal(t *testing.T, b *browser, d *daemon, fs *loopfs.FS, root, u string) {
	rotten := filepath.Join(root, "docs", "rot.bin")
	want := sumOf(t, rotten)
	fs.Sync(t)
	fs.FlipByte(t, rotten, 100)
	if code, run := auditRun(t, d); code != 4 || run.Counts["corrupt"] != 1 {
		t.Fatalf("audit run after the rot: exit %d, %+v", code, run)
	}
	rot := sumOf(t, rotten)
	b.run(t, "reload", chromedp.Navigate(strings.SplitN(u, "?", 2)[0]))
	b.waitJS(t, "problems", `document.querySelector("#problems-table tbody").textContent.includes("rot.bin")`)
	checkHistory(t, b, 2, "1")
	b.click(t, "problems-table", "rot.bin", "Heal")
	b.waitJS(t, "the heal's plan", `document.querySelector("#confirm").open || document.querySelector("#audit-msg").textContent.startsWith("Heal:")`)
	var msg, plan string
	b.eval(t, `document.querySelector("#audit-msg").textContent`, &msg)
	if strings.HasPrefix(msg, "Heal:") {
		t.Fatalf("heal from the page failed: %s", msg)
	}
	b.eval(t, `document.querySelector("#heal-plan").textContent`, &plan)
	if !strings.HasPrefix(plan, "Would heal from "+filepath.Join(root, "docs-copy", "rot.bin")+": ") {
		t.Errorf("the heal's plan says %q, want the copy in docs-copy/", plan)
	}
	if got := sumOf(t, rotten); got != rot {
		t.Fatalf("the heal's dry run changed the file")
	}
	b.run(t, "confirm", chromedp.Click(chromedp.CSS("#confirm-ok")))
	b.waitJS(t, "the heal", `document.querySelector("#confirm-done") || document.querySelector("#confirm-msg").textContent`)
	var after string
	b.eval(t, `(document.querySelector("#confirm-done") || document.querySelector("#confirm-msg")).textContent`, &after)
	if got := sumOf(t, rotten); got != want {
		t.Errorf("after the heal from the page (it says %q) the file's SHA-256 is %s, want %s", after, got, want)
	}
	if !strings.HasPrefix(after, "Healed from ") || !strings.Contains(after, "the damaged bytes are kept at ") {
		t.Errorf("after the heal the page says %q", after)
	}
	b.run(t, "close", chromedp.Click(chromedp.CSS("#confirm-cancel")))
	b.checkClean(t, "heal")
}
