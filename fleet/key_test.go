package fleet_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
)

func TestKeyValidate(t *testing.T) {
	long := strings.Repeat("a", 63)
	tests := []struct {
		name    string
		key     fleet.Key
		wantErr string
	}{
		{"simple", fleet.Key{"pc-eu", "default", "simple-game-server"}, ""},
		{"dotted name", fleet.Key{"c1", "ns", "br.v2.ranked"}, ""},
		{"longest parts", fleet.Key{long, long, strings.Repeat(long+".", 3) + strings.Repeat("a", 61)}, ""},
		{"empty cluster", fleet.Key{"", "ns", "n"}, "cluster"},
		{"uppercase cluster", fleet.Key{"PC", "ns", "n"}, "cluster"},
		{"cluster with dot", fleet.Key{"pc.eu", "ns", "n"}, "cluster"},
		{"cluster too long", fleet.Key{long + "a", "ns", "n"}, "cluster"},
		{"cluster leading dash", fleet.Key{"-pc", "ns", "n"}, "cluster"},
		{"namespace with dot", fleet.Key{"c", "a.b", "n"}, "namespace"},
		{"namespace with comma", fleet.Key{"c", "a,b", "n"}, "namespace"},
		{"name with slash", fleet.Key{"c", "ns", "a/b"}, "name"},
		{"name with underscore", fleet.Key{"c", "ns", "a_b"}, "name"},
		{"name dot dot", fleet.Key{"c", "ns", "a..b"}, "name"},
		{"name only dot", fleet.Key{"c", "ns", "."}, "name"},
		{"name too long", fleet.Key{"c", "ns", strings.Repeat("a", 254)}, "name"},
		{"name trailing dash", fleet.Key{"c", "ns", "a-"}, "name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.key.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, fleet.ErrInvalid)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestDocIDRoundTripsAndIsFirestoreSafe(t *testing.T) {
	for _, k := range []fleet.Key{
		{"pc-eu", "default", "simple-game-server"},
		{"0", "0", "0"},
		{"c", "ns", "a.b-c.d"},
	} {
		id := k.DocID()
		assertFirestoreDocID(t, id)
		got, err := fleet.ParseDocID(id)
		require.NoError(t, err)
		assert.Equal(t, k, got)
	}
}

func TestParseDocIDRejectsWhatDocIDCannotProduce(t *testing.T) {
	for _, id := range []string{"", "a", "a,b", "a,b,c,d", "A,b,c", "a,b,", ",b,c", "a/b,c,d", "__a__,b,c", "a,b,.", "a,b,.."} {
		_, err := fleet.ParseDocID(id)
		assert.ErrorIs(t, err, fleet.ErrInvalid, "id %q", id)
	}
}

// TestDocIDOrderIsTupleOrder: snapshot ranges are over document IDs, so the
// byte order of IDs must be the (cluster, namespace, name) order.
func TestDocIDOrderIsTupleOrder(t *testing.T) {
	keys := []fleet.Key{
		{"a", "b", "c"}, {"a", "b-c", "a"}, {"a", "b", "c.d"}, {"a", "b", "c-d"}, {"a-b", "a", "a"},
		{"a", "ba", "a"}, {"a0", "a", "a"}, {"a", "b", "c0"}, {"a", "b9", "z"}, {"a", "b", "b"},
	}
	byID := slices.Clone(keys)
	slices.SortFunc(byID, func(x, y fleet.Key) int { return strings.Compare(x.DocID(), y.DocID()) })
	byTuple := slices.Clone(keys)
	slices.SortFunc(byTuple, func(x, y fleet.Key) int {
		if c := strings.Compare(x.Cluster, y.Cluster); c != 0 {
			return c
		}
		return x.Ref().Compare(y.Ref())
	})
	assert.Equal(t, byTuple, byID)
}

func TestClusterPrefixSelectsExactlyThatCluster(t *testing.T) {
	lo, hi := fleet.ClusterPrefix("pc")
	in := []fleet.Key{{"pc", "a", "a"}, {"pc", "zzz", "zzz"}, {"pc", "0", "0"}}
	out := []fleet.Key{{"pc-eu", "a", "a"}, {"pc0", "a", "a"}, {"p", "z", "z"}, {"pca", "a", "a"}}
	for _, k := range in {
		id := k.DocID()
		assert.True(t, lo <= id && id < hi, "%s must be in [%s, %s)", id, lo, hi)
	}
	for _, k := range out {
		id := k.DocID()
		assert.False(t, lo <= id && id < hi, "%s must not be in [%s, %s)", id, lo, hi)
	}
}

// assertFirestoreDocID checks Firestore's rules for document IDs.
func assertFirestoreDocID(tb testing.TB, id string) {
	tb.Helper()
	assert.NotEmpty(tb, id)
	assert.LessOrEqual(tb, len(id), 1500, "at most 1500 bytes")
	assert.NotContains(tb, id, "/")
	assert.NotEqual(tb, ".", id)
	assert.NotEqual(tb, "..", id)
	assert.False(tb, len(id) >= 4 && strings.HasPrefix(id, "__") && strings.HasSuffix(id, "__"), "must not match __.*__: %q", id)
}

func FuzzDocIDCodec(f *testing.F) {
	f.Add("pc-eu", "default", "simple-game-server")
	f.Add("c", "ns", "a.b")
	f.Add("c", "n,s", "a")
	f.Add("__c__", "ns", "n")
	f.Add("c", "..", ".")
	f.Fuzz(func(t *testing.T, cluster, namespace, name string) {
		k := fleet.Key{Cluster: cluster, Namespace: namespace, Name: name}
		if k.Validate() != nil {
			return
		}
		id := k.DocID()
		assertFirestoreDocID(t, id)
		got, err := fleet.ParseDocID(id)
		require.NoError(t, err)
		require.Equal(t, k, got)
	})
}

func FuzzParseDocID(f *testing.F) {
	f.Add("pc-eu,default,simple-game-server")
	f.Add("a,b,c,d")
	f.Add("__a__")
	f.Add("a,,b")
	f.Fuzz(func(t *testing.T, id string) {
		k, err := fleet.ParseDocID(id)
		if err != nil {
			require.ErrorIs(t, err, fleet.ErrInvalid)
			return
		}
		require.NoError(t, k.Validate())
		require.Equal(t, id, k.DocID(), "the codec must be a bijection")
		assertFirestoreDocID(t, id)
	})
}
