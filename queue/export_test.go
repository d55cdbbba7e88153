package queue

import "time"

// ParseSchedule exposes parseSchedule to the tests (FuzzSchedule): the next
// tick after a time of a Periodic's Schedule.
func ParseSchedule(spec string) (func(time.Time) time.Time, error) {
	s, err := parseSchedule(spec)
	if err != nil {
		return nil, err
	}
	return s.Next, nil
}
