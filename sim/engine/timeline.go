package engine

import (
	"io"
	"strconv"
)

// TimelineHeader is the header line (without its newline) of a timeline
// CSV file: one [Sample] a row, the time in seconds, then the tokens each
// tier holds and the requests waiting and running.
const TimelineHeader = "t_s,device_tree_tokens,device_request_tokens,device_evictable_tokens,host_tokens,host_reserved_tokens,storage_tokens,waiting,running"

// AppendCSV appends s as a row of a timeline CSV file (see
// [TimelineHeader]), without a newline. The time has three decimals, as
// fmt's %.3f writes it.
func (s Sample) AppendCSV(b []byte) []byte {
	b = strconv.AppendFloat(b, s.Time.Seconds(), 'f', 3, 64)
	for _, v := range [...]int64{s.Device, s.Held, s.Evictable, s.Host, s.HostReserved, s.Storage, int64(s.Waiting), int64(s.Running)} {
		b = append(b, ',')
		b = strconv.AppendInt(b, v, 10)
	}
	return b
}

// WriteTimeline writes samples as a timeline CSV file, header first.
func WriteTimeline(w io.Writer, samples []Sample) error {
	b := append([]byte(TimelineHeader), '\n')
	for _, s := range samples {
		b = append(s.AppendCSV(b), '\n')
		if len(b) >= 32<<10 {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	_, err := w.Write(b)
	return err
}
