package idemamqp

import amqp "github.com/rabbitmq/amqp091-go"

// returns collects the messages the broker returns on one channel. amqp091-go hands
// a basic.return to listeners from its single reader goroutine, blocking until one
// takes it, and only then processes the next frame, the message's ack. A goroutine
// therefore receives every return at once, so the reader never waits on a publish
// batch however many messages it returns, and take, called after a batch's acks,
// sees every return received before them: the collector handles take's request only
// after it has stored the returns it received earlier.
type returns struct {
	takes chan chan []amqp.Return
	done  chan struct{} // closed when the channel closed; rest is final then
	rest  []amqp.Return
}

func collectReturns(in <-chan amqp.Return) *returns {
	r := &returns{takes: make(chan chan []amqp.Return), done: make(chan struct{})}
	go r.run(in)
	return r
}

func (r *returns) run(in <-chan amqp.Return) {
	var got []amqp.Return
	for {
		select {
		case ret, ok := <-in:
			if !ok { // the client closes listeners when the channel closes
				r.rest = got
				close(r.done)
				return
			}
			got = append(got, ret)
		case reply := <-r.takes:
			reply <- got
			got = nil
		}
	}
}

// take returns the returns collected since the last take.
func (r *returns) take() []amqp.Return {
	reply := make(chan []amqp.Return, 1)
	select {
	case r.takes <- reply:
		return <-reply
	case <-r.done:
		rest := r.rest
		r.rest = nil
		return rest
	}
}
