package fleetclient_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetclient"
	"github.com/fleetcast/fleetcast/functions/query"
	"github.com/fleetcast/fleetcast/internal/testenv/fleetapitest"
	"github.com/fleetcast/fleetcast/logging"
)

// Ask the query function for the pc fleets with a ready game server, the
// readiest first.
func ExampleClient_ListFleets() {
	url, stop := queryFunction() // your QueryFleets URL: terraform output -json fleetcast | jq -r .query_url
	defer stop()
	ctx := context.Background()
	// Over https, an http.Client that sends an ID token for the URL.
	hc, err := fleetclient.NewHTTPClient(ctx, url, fleetclient.Auth{})
	if err != nil {
		fmt.Println(err)
		return
	}
	client, err := fleetclient.New(hc, url)
	if err != nil {
		fmt.Println(err)
		return
	}
	q := fleetapi.NewQuery()
	q.Selector = labels.SelectorFromSet(labels.Set{"platform": "pc"})
	q.MinReady, q.OrderBy = 1, fleetapi.OrderByReady
	page, err := client.ListFleets(ctx, q)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range page.Items {
		fmt.Printf("%s/%s/%s ready=%d\n", f.Cluster, f.Namespace, f.Name, f.ReadyReplicas)
	}
	// Output:
	// us-east/games/pc-big ready=5
	// eu-west/games/pc-small ready=2
}

// queryFunction serves the query function over two clusters' fleets held
// in memory, as a deployment's QueryFleets would from Firestore.
func queryFunction() (url string, stop func()) {
	mem := fleetapitest.NewMemory(time.Now)
	now := time.Now()
	for i, c := range []string{"eu-west", "us-east"} {
		mem.PutCluster(fleet.ClusterDocument{Cluster: c, Labels: map[string]string{}, SnapshotVersion: fleet.Version{Term: 1, Seq: int64(i + 1)},
			SnapshotParts: 1, IngestedAt: now, HeartbeatAt: now})
	}
	for i, f := range []struct {
		cluster, name, platform string
		ready                   int64
	}{{"eu-west", "pc-small", "pc", 2}, {"us-east", "pc-big", "pc", 5}, {"us-east", "pc-drained", "pc", 0}, {"us-east", "ps5", "ps5", 3}} {
		mem.PutFleet(fleet.Document{Cluster: f.cluster, Namespace: "games", Name: f.name, UID: f.name, Version: fleet.Version{Term: 1, Seq: int64(10 + i)},
			Labels: map[string]string{"platform": f.platform}, Spec: &fleet.Spec{Replicas: f.ready},
			Status: &fleet.DocStatus{Replicas: f.ready, ReadyReplicas: f.ready, Counters: map[string]fleet.DocAggregate{}, Lists: map[string]fleet.DocAggregate{}}})
	}
	log := logging.New(io.Discard, logging.LevelWarning)
	srv := httptest.NewServer(query.NewHandler(fleetapi.NewService(mem, fleetapi.Options{Log: log}), log))
	return srv.URL, srv.Close
}
