package allocator

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
)

func TestNarrowForwardsTheCallersRequestToOneFleet(t *testing.T) {
	in := &pb.AllocationRequest{
		Namespace:           "games",
		MultiClusterSetting: &pb.MultiClusterSetting{Enabled: true, PolicySelector: &pb.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}},
		GameServerSelectors: []*pb.GameServerSelector{
			{MatchLabels: map[string]string{"mode": "ranked"}},
			{MatchLabels: map[string]string{"mode": "casual"}, GameServerState: pb.GameServerSelector_ALLOCATED},
		},
		Scheduling: pb.AllocationRequest_Distributed,
		Metadata:   &pb.MetaPatch{Labels: map[string]string{"match": "m-1"}},
		Priorities: []*pb.Priority{{Type: pb.Priority_Counter, Key: "rooms", Order: pb.Priority_Descending}},
		Counters:   map[string]*pb.CounterAction{"rooms": {Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(1)}},
	}
	before := proto.CloneOf(in)
	out := Narrow(in, Candidate{Policy: &Policy{Cluster: "pc"}, Namespace: "games-pc", Fleet: "casual-v1", Selector: 1})

	want := proto.CloneOf(in)
	want.Namespace = "games-pc"
	want.MultiClusterSetting = nil
	want.GameServerSelectors = []*pb.GameServerSelector{
		{MatchLabels: map[string]string{"mode": "casual", FleetLabel: "casual-v1"}, GameServerState: pb.GameServerSelector_ALLOCATED}}
	assert.True(t, proto.Equal(want, out), "got %v", out)
	assert.True(t, proto.Equal(before, in), "the caller's request is left as it was")
}

func TestNarrowReadsTheDeprecatedSelectors(t *testing.T) {
	in := &pb.AllocationRequest{
		PreferredGameServerSelectors: []*pb.GameServerSelector{{MatchLabels: map[string]string{"mode": "a"}}},
		RequiredGameServerSelector:   &pb.GameServerSelector{},
	}
	out := Narrow(in, Candidate{Policy: &Policy{Cluster: "pc"}, Namespace: "default", Fleet: "f", Selector: 1})
	assert.Nil(t, out.GetRequiredGameServerSelector())
	assert.Empty(t, out.GetPreferredGameServerSelectors())
	assert.Equal(t, map[string]string{FleetLabel: "f"}, out.GetGameServerSelectors()[0].GetMatchLabels(), "the required one, narrowed")

	out = Narrow(&pb.AllocationRequest{}, Candidate{Policy: &Policy{Cluster: "pc"}, Namespace: "default", Fleet: "f"})
	assert.Equal(t, map[string]string{FleetLabel: "f"}, out.GetGameServerSelectors()[0].GetMatchLabels(), "none given: a Ready one of the fleet")
}
