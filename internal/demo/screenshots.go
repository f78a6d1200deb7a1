package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fleetcast/fleetcast/internal/testenv/browsertest"
)

// Screenshot files, written into Options.Screenshots.
const (
	DashboardPNG = "dashboard.png"
	VersionsPNG  = "dashboard-versions.png"
)

// screenshots writes pictures of the dashboard at queryURL into dir once
// the demo's fleets have moved for a while: the whole page, and its
// "which versions run where" section.
func screenshots(ctx context.Context, queryURL, dir string, say func(string, ...any)) error {
	path := browsertest.Path()
	if path == "" {
		return errors.New("screenshots: no Chromium; install the Debian package chromium (scripts/chromium.sh path) or set CHROMIUM")
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("screenshots: the demo ended first: %w", ctx.Err())
	case <-time.After(15 * time.Second): // the simulators' fleets move
	}
	bctx, cancel, err := browsertest.Launch(path, 1400, 900)
	if err != nil {
		return fmt.Errorf("screenshots: %w", err)
	}
	defer cancel()
	bctx, cancelTimeout := context.WithTimeout(bctx, time.Minute)
	defer cancelTimeout()
	if err := chromedp.Do(bctx,
		chromedp.Navigate(queryURL+"/"),
		chromedp.Poll[chromedp.Void](`document.body.dataset.synced === "true" && document.querySelectorAll("#versions tbody tr").length > 0`),
		chromedp.Sleep(3*time.Second), // a few rows highlighted as they change
	); err != nil {
		return fmt.Errorf("screenshots: the dashboard did not load: %w", err)
	}
	page, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		return fmt.Errorf("screenshots: %w", err)
	}
	versions, err := chromedp.Run(bctx, chromedp.Screenshot(chromedp.ID("versions-section")))
	if err != nil {
		return fmt.Errorf("screenshots: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, png := range map[string][]byte{DashboardPNG: page, VersionsPNG: versions} {
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			return fmt.Errorf("screenshots: %w", err)
		}
	}
	say("screenshots written: %s and %s", filepath.Join(dir, DashboardPNG), filepath.Join(dir, VersionsPNG))
	return nil
}
