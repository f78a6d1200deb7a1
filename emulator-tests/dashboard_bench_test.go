package emulatortests

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/heapprofiler"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/browsertest"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/logging"
)

var (
	dashFleets  = flag.Int("dashboard.fleets", 10000, "BenchmarkDashboard: fleets the page holds")
	dashLoads   = flag.Int("dashboard.loads", 5, "BenchmarkDashboard: page loads timed after the first")
	dashChanges = flag.Int("dashboard.changes", 50, "BenchmarkDashboard: changes timed from Firestore to the page's repaint")
)

// dashPainted records, in the page, when each value of the first row's
// ready cell was first painted: the animation frame after the mutation.
const dashPainted = `(() => {
  window.painted = {};
  const body = document.getElementById("fleets").tBodies[0];
  new MutationObserver(() => {
    const td = body.querySelector('tr[data-id="c0/games/f00000"] [data-col=ready]');
    const v = td && td.textContent;
    if (v && !(v in window.painted)) {
      window.painted[v] = 0;
      requestAnimationFrame(() => { window.painted[v] = Date.now(); });
    }
  }).observe(body, { subtree: true, childList: true, characterData: true });
})()`

// BenchmarkDashboard measures the dashboard in headless Chromium, served
// by a started query instance (its view loaded, as query.New starts it)
// over the Firestore emulator holding -dashboard.fleets fleets in 4
// clusters: the time from navigation to the first render (the first page
// and the clusters' totals) and to the render of the whole set, on the
// browser's first load (cold: nothing cached, nothing compiled) and on
// later ones (warm); the page's JavaScript heap after a garbage collection
// and its element count; and the latency from a fleet's write to
// Firestore to the repaint of its row (listener, view, stream, render).
func BenchmarkDashboard(b *testing.B) {
	project := emulator.ProjectID(b)
	store := firestoredb.New(emulator.Firestore(b, project), time.Hour, time.Now)
	fillFleets(b, store, *dashFleets)
	log := logging.New(io.Discard, logging.LevelWarning)
	svc := fleetapi.NewService(store, fleetapi.Options{StaleAfter: time.Hour, Log: log})
	srv := httptest.NewServer(query.NewHandler(svc, log))
	b.Cleanup(srv.Close)
	svc.Start()
	// A serving instance: another client's watch keeps its view following
	// Firestore's listener, so a visitor pays neither for the view's load
	// nor for the sync an idle instance makes before it answers.
	watching, stopWatching := context.WithCancel(b.Context())
	var watcher sync.WaitGroup
	watcher.Go(func() {
		_ = svc.Watch(watching, fleetapi.NewQuery(), "", func(fleetapi.Event) error { return nil })
	})
	defer func() { stopWatching(); watcher.Wait() }()
	require.NoError(b, svc.Sync(b.Context()))
	br := browsertest.Start(b, 1400, 1000)
	b.ResetTimer()

	// load returns the times from navigation to the first render and to
	// the whole set's, in ms.
	load := func() (first, whole float64) {
		br.Do(b, chromedp.Navigate(srv.URL+"/"))
		br.WaitFor(b, "the render of the whole set", fmt.Sprintf(
			`performance.getEntriesByName("fleetcast:whole-set").length > 0 && document.body.dataset.fleets === "%d"`, *dashFleets))
		return browsertest.Eval[float64](b, br, `performance.getEntriesByName("fleetcast:first-render")[0].startTime`),
			browsertest.Eval[float64](b, br, `performance.getEntriesByName("fleetcast:whole-set")[0].startTime`)
	}
	cold, coldWhole := load()
	var warm, warmWhole []float64
	for range *dashLoads {
		first, whole := load()
		warm, warmWhole = append(warm, first), append(warmWhole, whole)
	}

	if _, err := chromedp.Call(br.Ctx, heapprofiler.CollectGarbage, cdp.Empty{}); err != nil {
		b.Fatal(err)
	}
	heap, err := chromedp.Call(br.Ctx, runtime.GetHeapUsage, cdp.Empty{})
	require.NoError(b, err)
	elements := browsertest.Eval[float64](b, br, `document.getElementsByTagName("*").length`)

	br.Do(b, chromedp.Evaluate[chromedp.Void](dashPainted))
	lat := make([]time.Duration, 0, *dashChanges)
	for i := range *dashChanges {
		ready := 200 + i // three digits: no thousands separator in the cell
		start := time.Now()
		_, err := store.Apply(b.Context(), fleet.Event{
			SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: "c0", Namespace: "games", Name: "f00000",
			Version: fleet.Version{Term: 2, Seq: int64(i + 1)}, ObservedAt: fleet.MicrosOf(start), Publisher: fleet.Publisher{ID: "p"},
			Fleet: fleet.State{UID: "u", Labels: map[string]string{"platform": "pc"}, Status: fleet.Status{ReadyReplicas: int64(ready)}},
		})
		require.NoError(b, err)
		expr := fmt.Sprintf(`window.painted["%d"]`, ready)
		br.WaitFor(b, "the change's repaint", expr)
		painted := browsertest.Eval[float64](b, br, expr)
		lat = append(lat, time.UnixMilli(int64(painted)).Sub(start))
	}
	b.StopTimer()
	require.Empty(b, br.Errors(), "the page reported errors")

	b.ReportMetric(cold, "first-render-cold-ms")
	reportSpread(b, "first-render-warm", "ms", warm)
	b.ReportMetric(coldWhole, "whole-set-cold-ms")
	reportSpread(b, "whole-set-warm", "ms", warmWhole)
	b.ReportMetric(heap.UsedSize/(1<<20), "js-heap-MiB")
	b.ReportMetric(elements, "elements")
	reportDist(b, "repaint", "ms", millis(lat))
	b.ReportMetric(float64(*dashFleets), "fleets")
}
