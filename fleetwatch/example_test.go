package fleetwatch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/gen/fleetcast/v1/fleetcastv1connect"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
	"github.com/fleetcast/fleetcast/logging"
)

// A matchmaker follows the query function's stream and picks, for each
// match, a fleet with free rooms, in the player's region first; among
// several, in proportion to their free rooms.
func ExampleWatchAPI() {
	url, stop := queryFunction() // your QueryFleets URL
	defer stop()
	// In Google Cloud, an *http.Client that adds an ID token for the URL.
	client := fleetcastv1connect.NewInformationServiceClient(http.DefaultClient, url)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	view, err := fleetwatch.WatchAPI(ctx, client, fleetwatch.Options{})
	if err != nil {
		fmt.Println("cannot watch:", err)
		return
	}
	pc142 := labels.SelectorFromSet(labels.Set{"platform": "pc", "app.kubernetes.io/version": "1.42"})
	policy := fleetwatch.Policy{
		Rank:   fleetwatch.ByCounter("rooms"),
		Prefer: []labels.Selector{labels.SelectorFromSet(labels.Set{"region": "eu"})},
	}
	f, tier, err := view.Choose(pc142, policy)
	if errors.Is(err, fleetwatch.ErrNoFleet) {
		fmt.Println("no fleet has room: queue the match")
		return
	}
	fmt.Printf("%s/%s/%s: %d rooms free, preference %d\n", f.Cluster, f.Namespace, f.Name, f.Counters["rooms"].Available, tier)

	// No asia cluster has one: any cluster's, drawn in proportion to the
	// free rooms (4 and 9), so that matchmakers spread their matches.
	policy.Prefer = []labels.Selector{labels.SelectorFromSet(labels.Set{"region": "asia"})}
	picks := map[string]int{}
	for range 10000 {
		f, tier, _ = view.Choose(pc142, policy)
		picks[fmt.Sprintf("%s/%s/%s, preference %d", f.Cluster, f.Namespace, f.Name, tier)]++
	}
	for _, k := range slices.Sorted(maps.Keys(picks)) {
		fmt.Printf("%s: about %d%% of matches\n", k, (picks[k]+500)/1000*10)
	}
	// Output:
	// eu-west/games/pc-small: 4 rooms free, preference 0
	// eu-west/games/pc-small, preference 1: about 30% of matches
	// us-east/games/pc-big, preference 1: about 70% of matches
}

// The view lists every fleet a selector matches, each marked stale when
// its cluster stopped reporting.
func ExampleView_Fleets() {
	url, stop := queryFunction()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	view, err := fleetwatch.WatchAPI(ctx, fleetcastv1connect.NewInformationServiceClient(http.DefaultClient, url), fleetwatch.Options{})
	if err != nil {
		fmt.Println("cannot watch:", err)
		return
	}
	for _, f := range view.Fleets(labels.SelectorFromSet(labels.Set{"platform": "pc"})) {
		fmt.Printf("%s/%s ready=%d stale=%t\n", f.Cluster, f.Name, f.ReadyReplicas, f.Stale)
	}
	// Output:
	// eu-west/pc-small ready=2 stale=false
	// us-east/pc-big ready=5 stale=false
}

// queryFunction serves the query function over two clusters' fleets held
// in memory, as a deployment's QueryFleets would from Firestore.
func queryFunction() (url string, stop func()) {
	mem := fleetapitest.NewMemory(time.Now)
	now := time.Now()
	for i, c := range []struct{ name, region string }{{"eu-west", "eu"}, {"us-east", "us"}} {
		mem.PutCluster(fleet.ClusterDocument{Cluster: c.name, Labels: map[string]string{"region": c.region},
			SnapshotVersion: fleet.Version{Term: 1, Seq: int64(i + 1)}, SnapshotParts: 1, IngestedAt: now, HeartbeatAt: now})
	}
	seq := int64(10)
	put := func(cluster, name, platform string, ready, rooms int64) {
		seq++
		mem.PutFleet(fleet.Document{Cluster: cluster, Namespace: "games", Name: name, UID: name, Version: fleet.Version{Term: 1, Seq: seq},
			Labels: map[string]string{"platform": platform, "app.kubernetes.io/version": "1.42"}, Spec: &fleet.Spec{Replicas: ready},
			Status: &fleet.DocStatus{Replicas: ready, ReadyReplicas: ready,
				Counters: map[string]fleet.DocAggregate{"rooms": {Count: 10 - rooms, Capacity: 10, Available: rooms}}, Lists: map[string]fleet.DocAggregate{}}})
	}
	put("eu-west", "pc-small", "pc", 2, 4)
	put("us-east", "pc-big", "pc", 5, 9)
	put("us-east", "ps5", "ps5", 3, 8)
	log := logging.New(io.Discard, logging.LevelWarning)
	srv := httptest.NewServer(query.NewHandler(fleetapi.NewService(mem, fleetapi.Options{Log: log}), log))
	return srv.URL, srv.Close
}
