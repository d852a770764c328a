package policy

// CheckInvariants exposes the O(n) self-check to the tests, whatever the
// build tags.
func (s *Simulator) CheckInvariants() { s.checkInvariants() }
