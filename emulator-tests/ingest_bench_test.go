package emulatortests

import (
	"bytes"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/functions/ingest"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/logging"
)

var (
	ingestRounds = flag.Int("ingest.rounds", 5, "BenchmarkIngestFunction: rounds per case (the spread)")
	ingestEvents = flag.Int("ingest.events", 400, "BenchmarkIngestFunction: push requests per round")
)

// BenchmarkIngestFunction measures one instance of IngestFleetEvents, its
// own process as in the cloud (LOG_LEVEL=INFO, the default), fed raw Pub/Sub
// push requests over HTTP: sequentially, and with 8 requests in flight as
// deployed (max_instance_request_concurrency = ingest_concurrency, 8),
// from two clusters: one cluster may hold at most half of an instance's
// requests (MAX_CLUSTER_IN_FLIGHT, 4 as deployed), past which its events
// are asked for again, so a full instance serves at least two.
// "changed" events each carry a new version and state for one of 100
// fleets; "duplicate" re-sends the events of the round before (a
// redelivery). Writes per event come from the function's own log, and so
// do its log bytes per event: a changed event logs one INFO line, a
// duplicate a DEBUG line (not logged at INFO) and its share of a summary
// line a minute.
func BenchmarkIngestFunction(b *testing.B) {
	host := emulator.Host(b, emulator.FirestoreHostEnv)
	fn, err := startFunctionTarget("IngestFleetEvents", host, "LOG_LEVEL=INFO")
	require.NoError(b, err)
	b.Cleanup(fn.stop)
	for _, inFlight := range []int{1, 8} {
		b.Run(fmt.Sprintf("in-flight=%d", inFlight), func(b *testing.B) {
			for range b.N {
				benchmarkIngest(b, fn, inFlight)
			}
		})
	}
}

func benchmarkIngest(b *testing.B, fn *function, inFlight int) {
	// Each cluster's requests in flight stay within its share: worker w
	// pushes cluster w mod len(clusters) only.
	clusters := make([]string, (inFlight+ingest.DefaultMaxClusterInFlight-1)/ingest.DefaultMaxClusterInFlight)
	for i := range clusters {
		clusters[i] = "ingest-" + randomHex(b, 4)
	}
	seq := int64(0)
	events := func() []fleet.Event {
		out := make([]fleet.Event, *ingestEvents)
		for i := range out {
			seq++
			out[i] = fleet.Event{SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: clusters[i%len(clusters)],
				Version: fleet.Version{Term: 1, Seq: seq}, ObservedAt: fleet.MicrosOf(time.Now()), Publisher: fleet.Publisher{ID: "bench"},
				Namespace: "games", Name: fmt.Sprintf("f%03d", i%100),
				Fleet: fleet.State{UID: "u", Labels: map[string]string{"platform": "pc", "version": "1.42"},
					Status: fleet.Status{Replicas: 100, ReadyReplicas: seq % 100, AllocatedReplicas: 100 - seq%100}}}
		}
		return out
	}
	n := 0
	// send pushes evs and returns the rate, the writes per event and the
	// log bytes per event. Every line of evs is logged before a marker
	// event sent after them has its line: the function's output is one
	// ordered stream.
	send := func(evs []fleet.Event) (perSecond, writesPerEvent, logBytesPerEvent float64) {
		logged := fn.logs.size()
		ids := make([]string, len(evs))
		bodies := make([][]byte, len(evs))
		for i, ev := range evs {
			data, err := fleet.EncodeEvent(ev)
			require.NoError(b, err)
			n++
			ids[i] = fmt.Sprintf("%s-%d", ev.Cluster, n)
			bodies[i] = mustJSON(b, ingest.MessagePublishedData{
				Message:      ingest.PubsubMessage{Data: data, MessageID: ids[i], PublishTime: time.Now().UTC()},
				Subscription: "projects/" + project + "/subscriptions/bench",
			})
		}
		start := time.Now()
		next := make([]chan int, len(clusters))
		for c := range next {
			next[c] = make(chan int)
		}
		var wg sync.WaitGroup
		for w := range inFlight {
			wg.Go(func() {
				for i := range next[w%len(clusters)] {
					resp, err := testhttp.Client.Post(pushURL(fn, evs[i].Cluster), "application/json", bytes.NewReader(bodies[i]))
					if err != nil {
						b.Error(err)
						continue
					}
					resp.Body.Close()
					if resp.StatusCode/100 != 2 {
						b.Errorf("push %s: HTTP %d", ids[i], resp.StatusCode)
					}
				}
			})
		}
		// Each cluster's events in order, the clusters side by side.
		var feeders sync.WaitGroup
		for c := range clusters {
			feeders.Go(func() {
				for i := c; i < len(bodies); i += len(clusters) {
					next[c] <- i
				}
				close(next[c])
			})
		}
		feeders.Wait()
		wg.Wait()
		elapsed := time.Since(start)
		logBytes := fn.logs.size() - logged // before the marker's line
		seq++
		marker := fleet.Event{SchemaVersion: fleet.SchemaVersion, Kind: fleet.KindUpsert, Cluster: clusters[0],
			Version: fleet.Version{Term: 1, Seq: seq}, ObservedAt: fleet.MicrosOf(time.Now()), Publisher: fleet.Publisher{ID: "bench"},
			Namespace: "games", Name: "marker", Fleet: fleet.State{UID: "m", Status: fleet.Status{ReadyReplicas: seq}}}
		data, err := fleet.EncodeEvent(marker)
		require.NoError(b, err)
		n++
		markerID := fmt.Sprintf("%s-%d", clusters[0], n)
		resp, err := testhttp.Client.Post(pushURL(fn, clusters[0]), "application/json", bytes.NewReader(mustJSON(b, ingest.MessagePublishedData{
			Message: ingest.PubsubMessage{Data: data, MessageID: markerID, PublishTime: time.Now().UTC()}})))
		require.NoError(b, err)
		resp.Body.Close()
		fn.logs.waitMessage(b, markerID, ingested)
		logBytes = max(logBytes, 0)
		writes := 0.0
		for _, id := range ids {
			for _, l := range fn.logs.matching(logging.KeyMessageID, id) {
				if w, ok := l["writes"].(float64); ok {
					writes += w
				}
			}
		}
		return float64(len(evs)) / elapsed.Seconds(), writes / float64(len(evs)), float64(logBytes) / float64(len(evs))
	}

	var changed, dup, changedWrites, dupWrites, changedLog, dupLog []float64
	send(events()) // create the documents: later rounds update them
	for range *ingestRounds {
		evs := events()
		rate, w, l := send(evs)
		changed, changedWrites, changedLog = append(changed, rate), append(changedWrites, w), append(changedLog, l)
		rate, w, l = send(evs)
		dup, dupWrites, dupLog = append(dup, rate), append(dupWrites, w), append(dupLog, l)
	}
	b.ReportMetric(quantile(changedLog, 0.5), "changed-log-bytes/ev")
	b.ReportMetric(quantile(dupLog, 0.5), "duplicate-log-bytes/ev")
	reportSpread(b, "changed", "ev/s", changed)
	reportSpread(b, "duplicate", "ev/s", dup)
	b.ReportMetric(quantile(changedWrites, 0.5), "changed-writes/ev")
	b.ReportMetric(quantile(dupWrites, 0.5), "duplicate-writes/ev")
	b.ReportMetric(float64(*ingestRounds), "rounds")
	b.ReportMetric(float64(*ingestEvents), "events/round")
}
