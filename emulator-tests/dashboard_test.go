package emulatortests

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/internal/testenv/browsertest"
)

// TestDashboardFollowsTheControlPlane: the dashboard in headless Chromium,
// served by a query instance over the pipeline's Firestore, from a Fleet
// on the Kubernetes API server through the publisher, Pub/Sub and the
// ingest function: the fleet appears, a status patch updates its row
// without a reload, a delete removes it, and the cluster and its fleets
// are marked stale when its publisher stops. The filter comes from the
// page's address.
func TestDashboardFollowsTheControlPlane(t *testing.T) {
	p, ns, pub := publishedCluster(t)
	srv := queryServer(t, p, fleetapi.Options{StaleAfter: 3 * time.Second, WatchPoll: 50 * time.Millisecond})

	b := browsertest.Start(t, 1400, 1000)
	q := url.Values{"cluster": {p.cluster}, "selector": {"platform=pc"}}
	b.Do(t, chromedp.Navigate(srv.URL+"/?"+q.Encode()))
	b.WaitFor(t, "the page's initial set", `document.body.dataset.synced === "true"`)
	b.Do(t, chromedp.Evaluate[chromedp.Void](`window.loadedOnce = true`))
	assert.Equal(t, p.cluster, browsertest.Eval[string](t, b, `document.getElementById("cluster").value`), "the address restores the filter")

	id := fmt.Sprintf("%s/%s/ranked", p.cluster, ns.Name)
	ready := fmt.Sprintf(`(document.querySelector('tr[data-id=%q] [data-col=ready]') || {}).textContent`, id)
	ns.CreateFleet(ns.Name, "ranked", map[string]string{"platform": "pc"})
	ns.CreateFleet(ns.Name, "other", map[string]string{"platform": "ps5"}) // not matching
	b.WaitFor(t, "the fleet written through the pipeline", ready+` === "0"`)

	ns.SetStatus(ns.Name, "ranked", map[string]any{"replicas": 5, "readyReplicas": 4, "allocatedReplicas": 1})
	b.WaitFor(t, "the status patch in its row", ready+` === "4"`)
	assert.True(t, browsertest.Eval[bool](t, b, `window.loadedOnce === true`), "updated in place, not reloaded")
	assert.Equal(t, 1, browsertest.Eval[int](t, b, `document.querySelectorAll("#fleets tbody tr").length`), "the selector keeps ps5's fleet out")
	b.WaitFor(t, "the cluster's heartbeat counting the fleets",
		fmt.Sprintf(`document.querySelector('#clusters tr[data-cluster=%q] [data-col=fleets]')?.textContent === "2"`, p.cluster))

	ns.DeleteFleet(ns.Name, "ranked")
	b.WaitFor(t, "the deleted fleet gone", fmt.Sprintf(`!document.querySelector('tr[data-id=%q]')`, id))

	casual := fmt.Sprintf(`document.querySelector('tr[data-id="%s/%s/casual"] [data-col=state]')?.textContent`, p.cluster, ns.Name)
	ns.CreateFleet(ns.Name, "casual", map[string]string{"platform": "pc"})
	b.WaitFor(t, "a new fleet", casual+` === "ok"`)
	pub.Stop()
	b.WaitFor(t, "the cluster marked stale", fmt.Sprintf(`document.querySelector('#clusters tr[data-cluster=%q]')?.dataset.stale === "true"`, p.cluster))
	b.WaitFor(t, "its fleet kept, marked stale", casual+` === "stale"`)
	require.Empty(t, b.Errors(), "the page reported errors")
}
