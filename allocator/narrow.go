package allocator

import (
	"maps"

	"google.golang.org/protobuf/proto"

	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
)

// Narrow returns the request to forward to a candidate's cluster: the
// caller's, allocating in the candidate's namespace from its fleet only,
// by the one selector it was chosen for (with agones.dev/fleet added to
// its labels), and with multi-cluster allocation off, so that the
// cluster's allocator allocates from its own game servers rather than
// forwarding it again. Everything else — scheduling, priorities,
// metadata, counter and list actions — goes as the caller sent it.
func Narrow(in *pb.AllocationRequest, c Candidate) *pb.AllocationRequest {
	out := proto.CloneOf(in)
	out.Namespace = c.Namespace
	out.MultiClusterSetting = nil
	out.RequiredGameServerSelector = nil
	out.PreferredGameServerSelectors = nil
	var sel *pb.GameServerSelector
	if _, selectors := selectorsOf(in); c.Selector < len(selectors) {
		sel = proto.CloneOf(selectors[c.Selector])
	} else {
		sel = &pb.GameServerSelector{} // the request gave none: any Ready game server
	}
	sel.MatchLabels = maps.Clone(sel.MatchLabels)
	if sel.MatchLabels == nil {
		sel.MatchLabels = map[string]string{}
	}
	sel.MatchLabels[FleetLabel] = c.Fleet
	out.GameServerSelectors = []*pb.GameServerSelector{sel}
	return out
}
