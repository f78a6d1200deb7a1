package fleetapi

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
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

// TestCheckBoundsRefusesAsTheParsersDo: what CheckBounds refuses, from a
// scan of the parameters, ParseQuery and ParsePlace refuse with the same
// error; what is within the bounds it lets through to them.
func TestCheckBoundsRefusesAsTheParsersDo(t *testing.T) {
	terms := func(n int) string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("!k%02d", i)
		}
		return strings.Join(out, ",")
	}
	largest, over := terms(MaxSelectorRequirements), terms(MaxSelectorRequirements+1)
	long := "k=" + strings.Repeat("v", MaxSelectorBytes)
	rules := func(n int, rule string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = rule
		}
		return out
	}
	for name, c := range map[string]struct {
		v       url.Values
		refused bool
	}{
		"nothing":                    {url.Values{}, false},
		"the largest selector":       {url.Values{"selector": {largest}}, false},
		"a set's commas":             {url.Values{"selector": {"k in (" + terms(MaxSelectorRequirements+10) + ")"}}, false},
		"the largest policy":         {url.Values{"policy": rules(MaxPolicyRules, largest+":0:5")}, false},
		"a requirement too many":     {url.Values{"selector": {over}}, true},
		"too many bytes":             {url.Values{"selector": {long}}, true},
		"a rule too many":            {url.Values{"policy": rules(MaxPolicyRules+1, ":0")}, true},
		"a rule's selector too big":  {url.Values{"policy": {":0", over + ":1:2"}}, true},
		"a rule's selector too long": {url.Values{"policy": {long + ":1"}}, true},
	} {
		t.Run(name, func(t *testing.T) {
			err := CheckBounds(c.v)
			if !c.refused {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			_, perr := ParsePlace(c.v)
			assert.Equal(t, perr, err, "ParsePlace's error")
			if _, policy := c.v["policy"]; !policy {
				_, qerr := ParseQuery(c.v)
				assert.Equal(t, qerr, err, "ParseQuery's error")
			}
		})
	}
}
