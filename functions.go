// Package fleetcast is the root of the module and the package the Cloud
// Functions Go buildpack builds from the uploaded source: it imports every
// function, whose init registers it, and the runtime serves the one named
// by FUNCTION_TARGET. The code lives in the packages below.
package fleetcast

import (
	// IngestFleetEvents: Pub/Sub fleet events → Firestore.
	_ "github.com/fleetcast/fleetcast/functions/ingest"
	// QueryFleets: the HTTP query API over Firestore.
	_ "github.com/fleetcast/fleetcast/functions/query"
)
