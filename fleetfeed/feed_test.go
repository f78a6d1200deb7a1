package fleetfeed_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetfeed"
	"github.com/fleetcast/fleetcast/fleetview"
)

// TestAChangeMessageCarriesItsDocument: a document goes through a change
// message as it was, with its cluster and fleet as attributes.
func TestAChangeMessageCarriesItsDocument(t *testing.T) {
	at := time.Date(2026, 12, 7, 8, 0, 0, 123000, time.UTC)
	d := &fleet.Document{Cluster: "pc", Namespace: "default", Name: "ranked", Version: fleet.Version{Term: 5, Seq: 9},
		Labels: map[string]string{"platform": "pc"}, Status: &fleet.DocStatus{ReadyReplicas: 4}, WrittenAt: at}
	m, err := fleetfeed.Message(d)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{fleetfeed.AttrCluster: "pc", fleetfeed.AttrFleet: "pc,default,ranked"}, m.Attributes)
	got, err := fleetfeed.Decode(m.Data)
	require.NoError(t, err)
	assert.Equal(t, d, got)
}

// TestDecodeRefusesWhatNamesNoFleet: a follower skips a message that is
// too large, not JSON, or names no valid fleet, rather than holding it.
func TestDecodeRefusesWhatNamesNoFleet(t *testing.T) {
	for name, data := range map[string]string{
		"too large":       `{"cluster":"pc","namespace":"default","name":"` + strings.Repeat("x", fleetfeed.MaxMessageBytes) + `"}`,
		"not JSON":        `{"cluster":`,
		"no cluster":      `{"namespace":"default","name":"ranked"}`,
		"invalid cluster": `{"cluster":"PC/../x","namespace":"default","name":"ranked"}`,
		"no name":         `{"cluster":"pc","namespace":"default"}`,
		"no namespace":    `{"cluster":"pc","name":"ranked"}`,
	} {
		_, err := fleetfeed.Decode([]byte(data))
		assert.Error(t, err, name)
	}
}

// TestValidateTopicID is Pub/Sub's rule for a topic's ID.
func TestValidateTopicID(t *testing.T) {
	for _, ok := range []string{"fleet-changes", "fc-fleet-changes", "a.b~c+d%e_f", "abc" + strings.Repeat("x", 252)} {
		assert.NoError(t, fleetfeed.ValidateTopicID(ok), ok)
	}
	for _, bad := range []string{"", "ab", "1abc", "-abc", "goog-changes", "GOOGchanges", "has space", "a/b/c", "abc" + strings.Repeat("x", 253)} {
		assert.Error(t, fleetfeed.ValidateTopicID(bad), bad)
	}
}

// TestAFollowerOfACheckerChecks: the view checks its clusters through the
// follower when the Source it wraps can (firestoredb's can).
func TestAFollowerOfACheckerChecks(t *testing.T) {
	_, plain := fleetfeed.NewFollower(source{}, nil, "t", nil).(fleetview.Checker)
	assert.False(t, plain)
	_, checked := fleetfeed.NewFollower(checker{}, nil, "t", nil).(fleetview.Checker)
	assert.True(t, checked)
}

type source struct{ fleetview.Source }

type checker struct{ fleetview.Checker }
