package firestoredb_test

import (
	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetview"
	"github.com/fleetcast/fleetcast/functions/ingest"
)

// The Store is what the read model follows and what the ingest function
// applies events to; both speak domain types only, so that their fakes
// need nothing of this package.
var (
	_ fleetapi.Follower = (*firestoredb.Store)(nil)
	_ fleetapi.Follower = (*firestoredb.Partition)(nil)
	_ ingest.Applier    = (*firestoredb.Store)(nil)
	// The view checks its clusters against either (fleetview.Checker).
	_ fleetview.Checker = (*firestoredb.Store)(nil)
	_ fleetview.Checker = (*firestoredb.Partition)(nil)
)
