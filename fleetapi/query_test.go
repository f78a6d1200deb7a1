package fleetapi

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
)

func TestParseQueryRejects(t *testing.T) {
	tests := []struct {
		query, param, message string
	}{
		{"bogus=1", "bogus", "unknown parameter"},
		{"cluster=Not_A_Label", "cluster", "not a cluster name"},
		{"cluster=" + strings.Repeat("c", 64), "cluster", "not a cluster name"},
		{"namespace=a&namespace=b", "namespace", "given 2 times"},
		{"namespace=Bad_NS", "namespace", "not a namespace name"},
		{"selector=version+in+(1", "selector", ""},
		{"minReady=-1", "minReady", "non-negative"},
		{"minReady=x", "minReady", "non-negative"},
		{"minAvailable=3", "minAvailable", "needs counter"},
		{"minListAvailable=3", "minListAvailable", "needs list"},
		{"counter=+", "counter", "not a counter key"},
		{"list=" + strings.Repeat("k", fleet.MaxAggregateKey+1), "list", "not a list key"},
		{"includeStale=yes", "includeStale", "want true or false"},
		{"rolloutComplete=done", "rolloutComplete", "want true or false"},
		{"rolloutComplete=true&rolloutComplete=false", "rolloutComplete", "given 2 times"},
		{"orderBy=age", "orderBy", "want name, ready or available"},
		{"orderBy=available", "orderBy", "needs a counter or list"},
		{"pageSize=0", "pageSize", "from 1 to 1000"},
		{"pageSize=1001", "pageSize", "from 1 to 1000"},
		{"pageToken=garbage", "pageToken", "not a token of this query"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			v, err := url.ParseQuery(tt.query)
			require.NoError(t, err)
			_, err = ParseQuery(v)
			e, ok := err.(*Error)
			require.True(t, ok, "an *Error, got %v", err)
			assert.Equal(t, InvalidArgument, e.Code)
			assert.Equal(t, tt.param, e.Param)
			assert.Contains(t, e.Message, tt.message)
		})
	}
	t.Run("more than MaxClusters", func(t *testing.T) {
		v := url.Values{}
		for i := range MaxClusters + 1 {
			v.Add("cluster", "c"+strings.Repeat("x", i))
		}
		_, err := ParseQuery(v)
		assert.Equal(t, "cluster", err.(*Error).Param)
	})
}

func TestParseQueryValuesRoundTrip(t *testing.T) {
	for _, raw := range []string{
		"",
		"cluster=a&cluster=b&namespace=games&selector=platform%3Dpc%2Cversion+in+%281%2C2%29",
		"minReady=3&counter=rooms&minAvailable=2&orderBy=available&pageSize=7",
		"list=slots&minListAvailable=0&includeStale=true&orderBy=ready",
		"rolloutComplete=false&minReady=1",
		"rolloutComplete=true",
	} {
		t.Run(raw, func(t *testing.T) {
			v, err := url.ParseQuery(raw)
			require.NoError(t, err)
			q, err := ParseQuery(v)
			require.NoError(t, err)
			again, err := ParseQuery(q.Values())
			require.NoError(t, err)
			assert.Equal(t, q.key(), again.key())
			assert.Equal(t, q.fingerprint(), again.fingerprint())
		})
	}
}

func doc(cluster, ns, name string, labels map[string]string, ready int64, counters map[string]fleet.DocAggregate) *fleet.Document {
	return &fleet.Document{
		Cluster: cluster, Namespace: ns, Name: name, Labels: labels, Version: fleet.Version{Term: 1, Seq: 1},
		UID: "u", Spec: &fleet.Spec{Replicas: ready},
		Status: &fleet.DocStatus{ReadyReplicas: ready, Counters: counters, Lists: map[string]fleet.DocAggregate{}},
	}
}

func TestMatches(t *testing.T) {
	d := doc("pc", "games", "ranked", map[string]string{"platform": "pc", "version": "1.42"}, 5,
		map[string]fleet.DocAggregate{"rooms": {Capacity: 10, Count: 4, Available: 6}})
	tests := []struct {
		query string
		stale bool
		want  bool
	}{
		{"", false, true},
		{"", true, false},
		{"includeStale=true", true, true},
		{"cluster=pc", false, true},
		{"cluster=xbox&cluster=ps5", false, false},
		{"namespace=games", false, true},
		{"namespace=other", false, false},
		{"selector=platform%3Dpc", false, true},
		{"selector=version+in+(1.41,1.42)", false, true},
		{"selector=version+notin+(1.42)", false, false},
		{"selector=!beta", false, true},
		{"selector=platform!%3Dpc", false, false},
		{"minReady=5", false, true},
		{"minReady=6", false, false},
		{"counter=rooms&minAvailable=6", false, true},
		{"counter=rooms&minAvailable=7", false, false},
		{"counter=seats", false, false},
		{"list=slots", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			v, err := url.ParseQuery(tt.query)
			require.NoError(t, err)
			q, err := ParseQuery(v)
			require.NoError(t, err)
			assert.Equal(t, tt.want, q.Matches(d, tt.stale))
		})
	}
	tomb := *d
	tomb.Deleted = true
	assert.False(t, NewQuery().Matches(&tomb, false), "a tombstone never matches")
}

// TestMatchesRollout: rolloutComplete keeps fleets whose rollout is known
// and (not) complete; an unknown rollout (an older publisher's fleet, or
// one without a set yet) matches neither.
func TestMatchesRollout(t *testing.T) {
	unknown := doc("pc", "games", "unknown", nil, 3, nil)
	done := doc("pc", "games", "done", nil, 3, nil)
	done.Rollout = &fleet.Rollout{Complete: true, Sets: []fleet.GameServerSet{{Name: "done-a", Current: true, Replicas: 3, ReadyReplicas: 3}}}
	rolling := doc("pc", "games", "rolling", nil, 3, nil)
	rolling.Rollout = &fleet.Rollout{Sets: []fleet.GameServerSet{{Name: "rolling-a", Replicas: 1}, {Name: "rolling-b", Current: true, Replicas: 2}}}
	for _, tt := range []struct {
		query string
		want  []bool // unknown, done, rolling
	}{
		{"", []bool{true, true, true}},
		{"rolloutComplete=true", []bool{false, true, false}},
		{"rolloutComplete=false", []bool{false, false, true}},
	} {
		v, err := url.ParseQuery(tt.query)
		require.NoError(t, err)
		q, err := ParseQuery(v)
		require.NoError(t, err)
		for i, d := range []*fleet.Document{unknown, done, rolling} {
			assert.Equal(t, tt.want[i], q.Matches(d, false), "%s: %s", tt.query, d.Name)
		}
	}
	yes, no := true, false
	assert.NotEqual(t, Query{RolloutComplete: &yes}.fingerprint(), Query{RolloutComplete: &no}.fingerprint())
	assert.NotEqual(t, Query{}.fingerprint(), Query{RolloutComplete: &no}.fingerprint())
}

// FuzzParseQuery: any parameters either fail with an InvalidArgument
// naming a parameter, or give a query whose Values parse back to it.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"", "selector=a%3Db", "cluster=a&pageSize=5&orderBy=ready", "counter=x&minAvailable=1&orderBy=available",
		"pageToken=eyJxIjoiIiwiayI6MCwiaWQiOiIifQ", "minReady=9223372036854775807", "selector=a+in+(b,c),!d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := ParseQuery(v)
		if err != nil {
			e, ok := err.(*Error)
			require.True(t, ok, "%v", err)
			require.Equal(t, InvalidArgument, e.Code)
			require.NotEmpty(t, e.Param)
			return
		}
		again, err := ParseQuery(q.Values())
		require.NoError(t, err, "Values() of %q = %q", raw, q.Values().Encode())
		require.Equal(t, q.key(), again.key())
	})
}

// FuzzPageToken: a token is accepted only for the query it was made for,
// and nothing a client sends as one makes the parser panic.
func FuzzPageToken(f *testing.F) {
	q := NewQuery()
	good := Cursor{Query: q.fingerprint(), Key: 3, ID: "c/ns/f"}.encode()
	f.Add(good)
	f.Add("")
	f.Add("e30")
	f.Add(Cursor{Query: "0000000000000000", ID: "x"}.encode())
	f.Fuzz(func(t *testing.T, token string) {
		next, err := q.Next(token)
		if err != nil {
			require.Equal(t, "pageToken", err.(*Error).Param)
			return
		}
		require.NotNil(t, next.After)
		require.Equal(t, q.fingerprint(), next.After.Query)
	})
}

// TestParseSelectorBounds: the commas of an in or notin set separate
// values, not requirements; a selector is refused past either limit, and
// a parse error is the parser's.
func TestParseSelectorBounds(t *testing.T) {
	many := make([]string, MaxSelectorRequirements+1)
	for i := range many {
		many[i] = fmt.Sprintf("k%d", i)
	}
	tests := []struct {
		selector string
		err      string
	}{
		{"platform in (pc,ps5,xbox),version!=1.41", ""},
		{strings.Join(many[:MaxSelectorRequirements], ","), ""},
		{strings.Join(many, ","), "MaxSelectorRequirements"},
		{"k in (" + strings.Join(many, ",") + ")", ""},
		{strings.Repeat("a", MaxSelectorBytes+1), "MaxSelectorBytes"},
		{"version in (1", "found"},
	}
	for _, tt := range tests {
		_, err := ParseSelector(tt.selector)
		if tt.err == "" {
			assert.NoError(t, err, "%.40s", tt.selector)
		} else {
			assert.ErrorContains(t, err, tt.err, "%.40s", tt.selector)
		}
	}
}
