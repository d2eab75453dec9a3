package upserttest

import "time"

// DrawnIdealTime is the ideal time DrawIndex brings a run within the
// family's bounds by: that of the client sending the largest batches that
// reach the capacity.
func (ix Index) DrawnIdealTime() time.Duration {
	return ix.model(FamilyTimeout).clientTime(ix.Records, idealClient{})
}
