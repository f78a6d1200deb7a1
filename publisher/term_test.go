package publisher_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/publisher"
)

func TestTermsGrowWhateverTheClocksSay(t *testing.T) {
	c := controlplane.Require(t, cp, cpErr)
	e := newNamespace(t)
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	at := func(ts time.Time) clock.PassiveClock { return testingclock.NewFakePassiveClock(ts) }
	now := time.Now()

	// Without leader election the Lease is created to keep the term.
	ahead := publisher.NewTermStore(kube.CoordinationV1(), e.Name, "terms", at(now.Add(time.Hour)))
	t1, err := ahead.Next(t.Context(), "")
	require.NoError(t, err)
	assert.Equal(t, now.Add(time.Hour).UnixMilli(), t1, "the term is the time in ms when that is larger")

	// A pod whose clock is an hour behind still gets a larger term.
	behind := publisher.NewTermStore(kube.CoordinationV1(), e.Name, "terms", at(now))
	t2, err := behind.Next(t.Context(), "")
	require.NoError(t, err)
	assert.Equal(t, t1+1, t2)

	// With leader election, only the holder may take a term.
	holder := "pub-a"
	_, err = kube.CoordinationV1().Leases(e.Name).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "elected"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	elected := publisher.NewTermStore(kube.CoordinationV1(), e.Name, "elected", at(now))
	_, err = elected.Next(t.Context(), "pub-b")
	require.ErrorIs(t, err, publisher.ErrNotHolder)
	t3, err := elected.Next(t.Context(), "pub-a")
	require.NoError(t, err)
	t4, err := elected.Next(t.Context(), "pub-a")
	require.NoError(t, err)
	assert.Greater(t, t4, t3)
	lease, err := kube.CoordinationV1().Leases(e.Name).Get(t.Context(), "elected", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, holder, *lease.Spec.HolderIdentity, "taking a term leaves the election alone")
}
