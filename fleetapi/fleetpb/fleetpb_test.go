package fleetpb_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetpb"
)

var at = time.Date(2026, 12, 1, 3, 4, 5, 6000, time.UTC)

func fullFleet() fleetapi.Fleet {
	return fleetapi.Fleet{
		Cluster: "pc", Namespace: "games", Name: "ranked", Labels: map[string]string{"platform": "pc"},
		Annotations: map[string]string{"note": "x"}, Replicas: 10, CurrentReplicas: 9, ReadyReplicas: 5, AllocatedReplicas: 3,
		ReservedReplicas: 1, Allocations: 7, Scheduling: "Packed", Players: fleet.DocCapacity{Count: 1, Capacity: 4, Available: 3},
		Counters:   map[string]fleet.DocAggregate{"rooms": {Count: 1, Capacity: 2, AllocatedCount: 1, AllocatedCapacity: 2, Available: 1}},
		Lists:      map[string]fleet.DocAggregate{"slots": {Count: 2, Capacity: 5, Available: 3}},
		ObservedAt: at, LagMillis: 12, Version: fleet.Version{Term: 2, Seq: 9}, Stale: true, Degraded: "labels dropped",
		Rollout: &fleet.Rollout{Sets: []fleet.GameServerSet{
			{Name: "ranked-a", Replicas: 2, ReadyReplicas: 1, AllocatedReplicas: 1},
			{Name: "ranked-b", Current: true, Replicas: 8, ReadyReplicas: 6, ReservedReplicas: 1, AllocatedReplicas: 1},
		}},
		Autoscalers: []fleetapi.Autoscaler{
			{Name: "buffer", Policy: fleet.AutoscalerPolicy{Type: "Buffer", BufferSize: "20%", MinReplicas: 1, MaxReplicas: 9}, SyncSeconds: 30,
				CurrentReplicas: 9, DesiredReplicas: 10, AbleToScale: true, ScalingLimited: true, LastScaleTime: &at},
			{Name: "rooms", Policy: fleet.AutoscalerPolicy{Type: "Counter", Key: "rooms", BufferSize: "5", MinCapacity: 1, MaxCapacity: 50, WebhookHost: "x"}},
		},
	}
}

func fullCluster() fleetapi.Cluster {
	return fleetapi.Cluster{
		Cluster: "pc", Labels: map[string]string{"region": "eu"}, Publisher: fleet.Publisher{ID: "p", Version: "v1"}, HeartbeatAt: at,
		FleetCount: 3, Totals: fleet.DocStatus{Replicas: 30, ReadyReplicas: 12, ReservedReplicas: 1, AllocatedReplicas: 4, Allocations: 9,
			Players: fleet.DocCapacity{Count: 1, Capacity: 2, Available: 1}, Counters: map[string]fleet.DocAggregate{"rooms": {Capacity: 3, Available: 3}},
			Lists: map[string]fleet.DocAggregate{}},
		TotalsTruncated: true, Stale: true, AllocatorEndpoint: "allocator.pc.example.com:443",
	}
}

// TestMessagesRoundTrip: every field of a fleet, a cluster and each kind
// of event comes back as it went.
func TestMessagesRoundTrip(t *testing.T) {
	assert.Equal(t, fullFleet(), fleetpb.FromFleet(fleetpb.Fleet(fullFleet())))
	assert.Equal(t, fullCluster(), fleetpb.FromCluster(fleetpb.Cluster(fullCluster())))
	for _, e := range []fleetapi.Event{
		{Kind: fleetapi.Added, Fleet: fullFleet(), ResumeToken: "t1"},
		{Kind: fleetapi.Modified, Fleet: fullFleet(), ResumeToken: "t2"},
		{Kind: fleetapi.Removed, Fleet: fullFleet(), ResumeToken: "t3"},
		{Kind: fleetapi.ClusterChanged, Cluster: fullCluster(), ResumeToken: "t4"},
		{Kind: fleetapi.Synced, FleetCount: 12, ResumeToken: "t5"},
		{Kind: fleetapi.Restart, ResumeToken: "t6"},
		{Kind: fleetapi.Heartbeat, Time: at, ResumeToken: "t7"},
	} {
		got, ok := fleetpb.FromEvent(fleetpb.Event(e))
		require.True(t, ok, e.Kind)
		assert.Equal(t, e, got)
	}
}

// TestFiltersRoundTrip: a query's filters, as a FleetFilter and back
// through the /v1 parameters, are the same query.
func TestFiltersRoundTrip(t *testing.T) {
	for _, s := range []string{"", "cluster=pc&cluster=ps5&namespace=games&selector=platform%3Dpc%2C%21beta&minReady=2",
		"counter=rooms&minAvailable=3&list=slots&minListAvailable=1&includeStale=true", "rolloutComplete=false", "rolloutComplete=true"} {
		params, err := url.ParseQuery(s)
		require.NoError(t, err)
		v, err := fleetapi.ParseQuery(params)
		require.NoError(t, err)
		back, err := fleetapi.ParseQuery(fleetpb.FilterValues(fleetpb.Filter(v)))
		require.NoError(t, err)
		assert.Equal(t, v.Values().Encode(), back.Values().Encode(), s)
	}
}

// TestPlacementsRoundTrip: an answer of Place survives protobuf, every
// field and every reason.
func TestPlacementsRoundTrip(t *testing.T) {
	p := fleetapi.Placements{
		Placements: []fleetapi.Placement{{Cluster: "pc", Namespace: "games", Name: "ranked", Labels: map[string]string{"platform": "pc"},
			AllocatorEndpoint: "203.0.113.9:443", Resource: "counter:rooms", Available: 7, ReadyReplicas: 3, Priority: 2, Weight: 100,
			ObservedAt: at, LagMillis: 12, HeartbeatAgeMillis: 3400, Stale: true}},
		Eligible: 4,
		LeftOut: []fleetapi.LeftOut{
			{Reason: fleetapi.FilteredOut, Fleets: 9, Clusters: []string{"ps5"}, ClusterCount: 1, Message: "9 fleets do not match the filter"},
			{Reason: fleetapi.StaleCluster, Fleets: 1, Clusters: []string{"old"}, ClusterCount: 1, Message: "m"},
			{Reason: fleetapi.NotInPolicy, Fleets: 2, Clusters: []string{"a", "b"}, ClusterCount: 12, Message: "m"},
			{Reason: fleetapi.TooLittleCapacity, Fleets: 3, Clusters: []string{"pc"}, ClusterCount: 1, Message: "m"},
		},
		Policy: []string{"region=eu:0:100", ":1:1"}, PolicySource: "request",
	}
	assert.Equal(t, p, fleetpb.FromPlacements(fleetpb.Placements(p)))
}

// TestPlaceRequestsParseAlike: a request sent over the InformationService
// is the one /v1/placements parses from its parameters.
func TestPlaceRequestsParseAlike(t *testing.T) {
	v, err := url.ParseQuery("cluster=pc&selector=platform%3Dpc&counter=rooms&minAvailable=4&list=slots&minListAvailable=2" +
		"&players=3&gameServers=1&count=5&policy=region%3Deu:0:100&policy=:1:1&includeStale=true&rolloutComplete=true&minReady=2")
	require.NoError(t, err)
	req, err := fleetapi.ParsePlace(v)
	require.NoError(t, err)
	again, err := fleetapi.ParsePlace(fleetpb.PlaceValues(fleetpb.PlaceRequest(req)))
	require.NoError(t, err)
	assert.Equal(t, req.Values(), again.Values())
	assert.Equal(t, v, again.Values())

	// No weight is weight 1; an empty policy given is every cluster alike.
	every := fleetapi.PlaceRequest{Policy: &fleetapi.Policy{}}
	got, err := fleetapi.ParsePlace(fleetpb.PlaceValues(fleetpb.PlaceRequest(every)))
	require.NoError(t, err)
	assert.Equal(t, []string{":0:1"}, got.Policy.Strings())
}
