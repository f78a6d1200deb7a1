package fleetapi

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"
)

// TestCompiledSelectorsMatchAsLabelsDoes: over random selectors of every
// operator and random label sets, the compiled selector ParseSelector
// returns answers what labels.Parse's does, for a labels.Set and for any
// other labels.Labels.
func TestCompiledSelectorsMatchAsLabelsDoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	keys := []string{"a", "b", "app.kubernetes.io/version", "n"}
	vals := []string{"x", "y", "z", "1", "10", ""}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	set := func() string {
		var vs []string
		for range 1 + rng.IntN(10) {
			if v := pick(vals); v != "" {
				vs = append(vs, v)
			}
		}
		if len(vs) == 0 {
			vs = []string{"x"}
		}
		return "(" + strings.Join(vs, ",") + ")"
	}
	term := func() string {
		k := pick(keys)
		switch rng.IntN(9) {
		case 0:
			return k + "=" + pick(vals)
		case 1:
			return k + "==" + pick(vals)
		case 2:
			return k + "!=" + pick(vals)
		case 3:
			return k + " in " + set()
		case 4:
			return k + " notin " + set()
		case 5:
			return k
		case 6:
			return "!" + k
		case 7:
			return "n>" + fmt.Sprint(rng.IntN(12))
		default:
			return "n<" + fmt.Sprint(rng.IntN(12))
		}
	}
	for range 2000 {
		terms := make([]string, 1+rng.IntN(4))
		for i := range terms {
			terms[i] = term()
		}
		s := strings.Join(terms, ",")
		want, err := labels.Parse(s)
		require.NoError(t, err, s)
		got, err := ParseSelector(s)
		require.NoError(t, err, s)
		require.Equal(t, want.String(), got.String())
		for range 20 {
			ls := labels.Set{}
			for _, k := range keys {
				if rng.IntN(3) > 0 {
					ls[k] = pick(vals)
				}
			}
			require.Equal(t, want.Matches(ls), got.Matches(ls), "%q on %v", s, ls)
			require.Equal(t, want.Matches(ls), got.Matches(labels.Labels(other{ls})), "%q on %v (not a Set)", s, ls)
		}
	}
}

// other is a labels.Labels that is not a labels.Set.
type other struct{ labels.Set }
