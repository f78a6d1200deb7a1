// Package browsertest drives a real headless Chromium with chromedp, for
// tests (Start) and for make screenshots (Launch). The browser is
// $CHROMIUM, else chromium on PATH; make test installs it
// (scripts/chromium.sh) and sets REQUIRE_BROWSER=1, under which a missing
// browser fails the test instead of skipping it.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fleetcast/fleetcast/internal/testenv"
)

// Timeout bounds everything one test does in its browser.
const Timeout = 2 * time.Minute

// Path returns the browser to drive, or "" when there is none.
func Path() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Browser is one headless Chromium tab, with what its page reported on
// the console.
type Browser struct {
	Ctx context.Context

	mu     sync.Mutex
	errors []string
}

// Start starts a browser for tb, ended when the test ends, sized w×h.
func Start(tb testenv.TB, w, h int) *Browser {
	tb.Helper()
	path := Path()
	if path == "" {
		if os.Getenv("REQUIRE_BROWSER") == "1" {
			tb.Fatal("REQUIRE_BROWSER=1 but no Chromium: set CHROMIUM or install the Debian package chromium (scripts/chromium.sh path)")
		}
		tb.Skip("no Chromium (set CHROMIUM, or run make test, which installs it)")
	}
	ctx, cancel, err := Launch(path, w, h)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancelTimeout := context.WithTimeout(ctx, Timeout)
	b := &Browser{Ctx: ctx}
	// The console's errors, uncaught exceptions and the browser log's
	// errors (a failed load), as the page reports them.
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				b.add(fmt.Sprintf("%s %s:%d %s", m.Type, m.URL, m.Line+1, m.Text))
			}
		}
	}()
	tb.Cleanup(func() {
		cancelTimeout()
		cancel()
		<-done
	})
	return b
}

// Launch starts the headless Chromium at path with a w×h window and opens
// a tab; cancel closes the browser.
func Launch(path string, w, h int) (ctx context.Context, cancel context.CancelFunc, err error) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // tests run as root in CI
		chromedp.DisableGPU,
		chromedp.WindowSize(w, h),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	cancel = func() {
		cancelTab()
		cancelAlloc()
	}
	if err := chromedp.Do(ctx); err != nil { // starts the browser, opens the tab
		cancel()
		return nil, nil, fmt.Errorf("start %s: %w", path, err)
	}
	return ctx, cancel, nil
}

func (b *Browser) add(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors = append(b.errors, s)
}

// Errors returns the console errors, uncaught exceptions and failed loads
// the page reported so far.
func (b *Browser) Errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// Do runs chromedp actions in the tab, failing tb on error.
func (b *Browser) Do(tb testenv.TB, actions ...chromedp.Action[chromedp.Void]) {
	tb.Helper()
	if err := chromedp.Do(b.Ctx, actions...); err != nil {
		tb.Fatalf("browser: %v; page errors: %v", err, b.Errors())
	}
}

// Eval evaluates a JavaScript expression in the page and returns its
// value decoded as T, failing tb on error.
func Eval[T any](tb testenv.TB, b *Browser, expr string) T {
	tb.Helper()
	v, err := chromedp.Run(b.Ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.Fatalf("browser: evaluate %s: %v; page errors: %v", expr, err, b.Errors())
	}
	return v
}

// WaitFor polls a JavaScript expression in the page until it is truthy,
// failing tb with what when the browser's Timeout passes.
func (b *Browser) WaitFor(tb testenv.TB, what, expr string) {
	tb.Helper()
	if _, err := chromedp.Run(b.Ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
		tb.Fatalf("waiting for %s (%s): %v; page errors: %v", what, expr, err, b.Errors())
	}
}
