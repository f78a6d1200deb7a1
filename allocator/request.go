// Package allocator places an Agones allocation by fleetcast's live view:
// it reads an AllocationRequest of Agones' allocation API (Parse), finds
// the fleets of every cluster whose game servers can satisfy it (Match),
// and ranks them (Rank) so that the request is forwarded to the cluster's
// own allocator, narrowed to one fleet (Narrow).
package allocator

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetcast/fleetcast/fleet"
	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
)

// The labels Agones gives every game server of a fleet, besides its
// template's (fleet.State.GameServerLabels).
const (
	// FleetLabel names the game server's fleet.
	FleetLabel = "agones.dev/fleet"
	// GameServerSetLabel names its GameServerSet.
	GameServerSetLabel = "agones.dev/gameserverset"
)

// Bounds of a request. Agones sets none of its own; these are far above
// what matchmakers send (a few selectors of a few labels), and keep one
// caller's request from costing others a scan of every fleet per term.
const (
	// MaxSelectors bounds gameServerSelectors (with the deprecated
	// preferred and required ones).
	MaxSelectors = 16
	// MaxSelectorTerms bounds one selector's match labels, counters and
	// lists together.
	MaxSelectorTerms = 64
	// MaxPolicyLabels bounds multiClusterSetting.policySelector.
	MaxPolicyLabels = 64
)

// DefaultNamespace is the namespace of a request that names none, as
// Kubernetes takes it for a namespaced object.
const DefaultNamespace = "default"

// Request is what placing an AllocationRequest needs of it.
type Request struct {
	// Namespace is the game servers' namespace.
	Namespace string
	// Selectors are the request's gameServerSelectors in its order of
	// preference: the deprecated preferredGameServerSelectors and then
	// requiredGameServerSelector when it gives those instead, as Agones
	// reads them. A request with none has one that matches any Ready game
	// server.
	Selectors []Selector
	// PolicyLabels select the allocation policies that apply
	// (multiClusterSetting.policySelector.matchLabels) when MultiCluster
	// is set; without it every policy applies.
	MultiCluster bool
	PolicyLabels map[string]string
}

// Selector is one gameServerSelector, as far as a fleet's aggregate state
// can tell: a fleet matches when some of its game servers may satisfy it.
// What the aggregates cannot tell — a most available, a count's range, a
// list's value — the cluster's allocator applies to each game server.
type Selector struct {
	// MatchLabels are labels every matching game server has.
	MatchLabels map[string]string
	// Allocated asks for an Allocated game server (gameServerState
	// ALLOCATED, to add players or rooms to it); otherwise a Ready one.
	Allocated bool
	// Players is the player capacity it needs available (players.
	// minAvailable).
	Players int64
	// Counters and Lists are what it needs available in each counter
	// and list it names (minAvailable; 0 when it gives only other bounds).
	Counters map[string]int64
	Lists    map[string]int64
}

// Parse reads an AllocationRequest. A request fleetcast cannot place is
// an InvalidArgument status that names the field, as Agones' allocator
// answers one it cannot read.
func Parse(in *pb.AllocationRequest) (Request, error) {
	r := Request{Namespace: in.GetNamespace()}
	if r.Namespace == "" {
		r.Namespace = DefaultNamespace
	}
	if err := fleet.ValidateNamespace(r.Namespace); err != nil {
		return Request{}, status.Error(codes.InvalidArgument, reason(err))
	}
	fields, selectors := selectorsOf(in)
	if len(selectors) > MaxSelectors {
		return Request{}, invalid(strings.TrimSuffix(fields[0], "[0]"), "%d selectors: at most %d", len(selectors), MaxSelectors)
	}
	for i, s := range selectors {
		sel, err := parseSelector(fields[i], s)
		if err != nil {
			return Request{}, err
		}
		r.Selectors = append(r.Selectors, sel)
	}
	if len(r.Selectors) == 0 {
		r.Selectors = []Selector{{}}
	}
	if mc := in.GetMultiClusterSetting(); mc.GetEnabled() {
		r.MultiCluster = true
		r.PolicyLabels = maps.Clone(mc.GetPolicySelector().GetMatchLabels())
		if len(r.PolicyLabels) > MaxPolicyLabels {
			return Request{}, invalid("multiClusterSetting.policySelector.matchLabels", "%d labels: at most %d", len(r.PolicyLabels), MaxPolicyLabels)
		}
		if err := fleet.ValidateLabels("multiClusterSetting.policySelector.matchLabels", r.PolicyLabels); err != nil {
			return Request{}, status.Error(codes.InvalidArgument, reason(err))
		}
	}
	return r, nil
}

// selectorsOf returns a request's selectors in order of preference, and
// the field each is: gameServerSelectors, or the deprecated
// preferredGameServerSelectors and then requiredGameServerSelector, as
// Agones converts them, when it gives none.
func selectorsOf(in *pb.AllocationRequest) (fields []string, selectors []*pb.GameServerSelector) {
	if selectors = in.GetGameServerSelectors(); len(selectors) == 0 {
		selectors = slices.Clone(in.GetPreferredGameServerSelectors())
		if req := in.GetRequiredGameServerSelector(); req != nil {
			selectors = append(selectors, req)
		}
	}
	preferred := len(in.GetPreferredGameServerSelectors())
	for i := range selectors {
		switch {
		case len(in.GetGameServerSelectors()) > 0:
			fields = append(fields, fmt.Sprintf("gameServerSelectors[%d]", i))
		case i < preferred:
			fields = append(fields, fmt.Sprintf("preferredGameServerSelectors[%d]", i))
		default:
			fields = append(fields, "requiredGameServerSelector")
		}
	}
	return fields, selectors
}

func parseSelector(field string, in *pb.GameServerSelector) (Selector, error) {
	terms := len(in.GetMatchLabels()) + len(in.GetCounters()) + len(in.GetLists())
	if terms > MaxSelectorTerms {
		return Selector{}, invalid(field, "%d match labels, counters and lists: at most %d", terms, MaxSelectorTerms)
	}
	s := Selector{MatchLabels: maps.Clone(in.GetMatchLabels())}
	if err := fleet.ValidateLabels(field+".matchLabels", s.MatchLabels); err != nil {
		return Selector{}, status.Error(codes.InvalidArgument, reason(err))
	}
	switch in.GetGameServerState() {
	case pb.GameServerSelector_READY:
	case pb.GameServerSelector_ALLOCATED:
		s.Allocated = true
	default:
		return Selector{}, invalid(field+".gameServerState", "%v: want READY or ALLOCATED", in.GetGameServerState())
	}
	if p := in.GetPlayers(); p != nil {
		if p.GetMaxAvailable() != 0 && p.GetMaxAvailable() < p.GetMinAvailable() {
			return Selector{}, invalid(field+".players", "maxAvailable %d is below minAvailable %d", p.GetMaxAvailable(), p.GetMinAvailable())
		}
		s.Players = int64(min(p.GetMinAvailable(), 1<<62))
	}
	var err error
	if s.Counters, err = minimums(field+".counters", in.GetCounters(), func(c *pb.CounterSelector) (int64, int64, error) {
		if c.GetMinCount() < 0 || c.GetMaxCount() < 0 || c.GetMinAvailable() < 0 || c.GetMaxAvailable() < 0 {
			return 0, 0, fmt.Errorf("bounds must not be negative")
		}
		if c.GetMaxCount() != 0 && c.GetMaxCount() < c.GetMinCount() {
			return 0, 0, fmt.Errorf("maxCount %d is below minCount %d", c.GetMaxCount(), c.GetMinCount())
		}
		return c.GetMinAvailable(), c.GetMaxAvailable(), nil
	}); err != nil {
		return Selector{}, err
	}
	if s.Lists, err = minimums(field+".lists", in.GetLists(), func(l *pb.ListSelector) (int64, int64, error) {
		if l.GetMinAvailable() < 0 || l.GetMaxAvailable() < 0 {
			return 0, 0, fmt.Errorf("bounds must not be negative")
		}
		return l.GetMinAvailable(), l.GetMaxAvailable(), nil
	}); err != nil {
		return Selector{}, err
	}
	return s, nil
}

// minimums reads the minAvailable of each counter or list selector,
// checking its bounds.
func minimums[T any](field string, in map[string]T, bounds func(T) (minAvailable, maxAvailable int64, err error)) (map[string]int64, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string]int64, len(in))
	for _, k := range slices.Sorted(maps.Keys(in)) {
		f := fmt.Sprintf("%s[%q]", field, k)
		if err := fleet.ValidateAggregateKey(k); err != nil {
			return nil, invalid(f, "%s", reason(err))
		}
		lo, hi, err := bounds(in[k])
		if err == nil && hi != 0 && hi < lo {
			err = fmt.Errorf("maxAvailable %d is below minAvailable %d", hi, lo)
		}
		if err != nil {
			return nil, invalid(f, "%v", err)
		}
		out[k] = lo
	}
	return out, nil
}

// reason is a validation error of package fleet without its "invalid: ".
func reason(err error) string {
	return strings.TrimPrefix(err.Error(), fleet.ErrInvalid.Error()+": ")
}

// invalid is the InvalidArgument status of a field.
func invalid(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}
