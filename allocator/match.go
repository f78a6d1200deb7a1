package allocator

import (
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetapi"
)

// Match reports whether some game servers of the fleet d may satisfy s,
// from its aggregate state, and the capacity that weighs its chance:
// what is available of the scarcest counter or list s names, else the
// players' capacity when s needs some, else its game servers in the
// state s asks for. It never leaves out a fleet one of whose game
// servers satisfies s; it may keep one none of whose do (a sum of
// capacities, a count's range, a list's value), which the cluster's
// allocator then refuses, and the request goes on to the next candidate.
func (s Selector) Match(d *fleet.Document) (capacity int64, ok bool) {
	if d == nil || d.Deleted || !s.matchesLabels(d) {
		return 0, false
	}
	st := d.Status
	if st == nil {
		st = &fleet.DocStatus{}
	}
	servers := fleetapi.ReadyOf(st)
	if s.Allocated {
		servers = max(0, min(st.AllocatedReplicas, st.Replicas))
	}
	if servers < 1 {
		return 0, false
	}
	capacity = servers
	players := fleetapi.PlayersAvailable(st.Players)
	if players < s.Players {
		return 0, false
	}
	if s.Players > 0 {
		capacity = players
	}
	scarcest := int64(-1)
	for _, named := range []struct {
		need map[string]int64
		have map[string]fleet.DocAggregate
	}{{s.Counters, st.Counters}, {s.Lists, st.Lists}} {
		for k, least := range named.need {
			a, has := named.have[k]
			if !has {
				return 0, false
			}
			avail := availableTo(a, s.Allocated)
			if avail < least {
				return 0, false
			}
			if scarcest < 0 || avail < scarcest {
				scarcest = avail
			}
		}
	}
	if scarcest >= 0 {
		capacity = scarcest
	}
	return capacity, true
}

// availableTo is what is available of a counter or list on the fleet's
// Allocated game servers (allocated), or on the others: everything
// available but what the Allocated ones have, which counts the Ready
// ones and any other's, never fewer than the Ready ones have.
func availableTo(a fleet.DocAggregate, allocated bool) int64 {
	all := fleetapi.AvailableOf(a)
	onAllocated := max(0, min(all, a.AllocatedCapacity-max(0, a.AllocatedCount)))
	if allocated {
		return onAllocated
	}
	return all - onAllocated
}

// matchesLabels reports whether the game servers of d carry every label
// s matches: their template's, the fleet's name under FleetLabel, and
// under GameServerSetLabel the name of one of its sets (any name while
// they are unknown: the fleet is not left out for what is not known).
func (s Selector) matchesLabels(d *fleet.Document) bool {
	for k, v := range s.MatchLabels {
		switch k {
		case FleetLabel:
			if v != d.Name {
				return false
			}
		case GameServerSetLabel:
			if d.Rollout != nil && !hasSet(d.Rollout, v) {
				return false
			}
		default:
			if have, ok := d.GameServerLabels[k]; !ok || have != v {
				return false
			}
		}
	}
	return true
}

func hasSet(r *fleet.Rollout, name string) bool {
	for _, s := range r.Sets {
		if s.Name == name {
			return true
		}
	}
	return false
}
