package engine

import "math"

// Time is virtual time in integer nanoseconds since the start of a run
// (the trace's zero). It is a defined type, not an alias of int64, so a
// count of tokens or bytes cannot be added to it by mistake; convert with
// Time(ns) and int64(t). No float ever holds a Time inside a simulator: the
// float views below are for reporting only.
type Time int64

// Never is the largest Time, used as "no limit" (RunUntil(Never) runs every
// event) and as the saturated value of a time past int64 nanoseconds.
const Never Time = math.MaxInt64

// Seconds returns t in seconds, for reporting.
func (t Time) Seconds() float64 { return float64(t) / 1e9 }

// Milliseconds returns t in milliseconds, for reporting.
func (t Time) Milliseconds() float64 { return float64(t) / 1e6 }
