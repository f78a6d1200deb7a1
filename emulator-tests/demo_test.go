package emulatortests

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/internal/demo"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/proc"
	"github.com/fleetcast/fleetcast/internal/testenv/syncbuf"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// TestDemoRunsThePipeline runs make demo's program briefly: it checks by
// itself, at the end, that fleets of all three clusters reached Firestore
// and the query API; here the API is also asked while it runs, and every
// shell example of the docs and of the CLI's help runs against it, as a
// reader who just ran make demo would run them (docExamples).
func TestDemoRunsThePipeline(t *testing.T) {
	controlplane.Require(t, cp, cpErr) // the binaries; the demo starts its own
	emulator.Host(t, emulator.FirestoreHostEnv)
	emulator.Host(t, emulator.PubSubHostEnv)
	bin := filepath.Join(t.TempDir(), "fleetcast")
	require.NoError(t, proc.Build(t.Context(), "", "github.com/fleetcast/fleetcast/cmd/fleetcast", bin))
	examples := append(docExamples(t, ".."), helpExamples(t, bin)...)
	var out syncbuf.Buffer
	var queryURL, page string
	err := demo.Run(t.Context(), demo.Options{
		Duration:  50 * time.Second,
		Out:       &out,
		ModuleDir: "..",
		Ready: func(url string) {
			queryURL = url
			resp, err := testhttp.Client.Get(url + "/")
			if err == nil {
				page = resp.Header.Get("Content-Type")
				resp.Body.Close()
			}
			// Once every cluster's fleets are served.
			require.Eventually(t, func() bool {
				var l fleetapi.FleetList
				if getJSONTest(url+"/v1/fleets?pageSize=1000", &l) != nil {
					return false
				}
				clusters := map[string]bool{}
				for _, f := range l.Items {
					clusters[f.Cluster] = true
				}
				return len(clusters) == len(demo.Clusters)
			}, 30*time.Second, 200*time.Millisecond, "the demo's fleets of every cluster")
			runExamples(t, bin, url, examples)
		},
	})
	require.NoError(t, err, "demo output:\n%s", out.String())
	require.NotEmpty(t, queryURL)
	assert.Contains(t, out.String(), "check passed: the query API serves")
	assert.Contains(t, out.String(), "The dashboard, live: "+queryURL+"/")
	assert.Contains(t, page, "text/html", "the dashboard is served where the demo says")
	assert.Contains(t, out.String(), "curl -s '"+queryURL+"/v1/fleets?selector=platform=pc'")
	// Everything it started is gone: the API no longer answers.
	var l fleetapi.FleetList
	assert.Error(t, getJSONTest(queryURL+"/v1/fleets", &l))
	assert.False(t, strings.Contains(out.String(), "panic"))
}

func getJSONTest(url string, v any) error {
	resp, err := testhttp.Client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
