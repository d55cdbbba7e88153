package stream

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// checkOrigin refuses a browser request from a page of another origin than the
// server's host and OriginPatterns: the rule websocket.Accept applies to the
// socket, applied to GET /events too.
func (s *Server) checkOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		//lint:ignore ST1005 the message starts with the header's name
		return fmt.Errorf("Origin %.80q is not a URL with a host", origin)
	}
	if strings.EqualFold(u.Host, r.Host) {
		return nil
	}
	for _, p := range s.cfg.OriginPatterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return nil
		}
	}
	//lint:ignore ST1005 the message starts with the header's name
	return fmt.Errorf("Origin %.80q may not read this server's streams: add it to ServerConfig.OriginPatterns if it should", origin)
}

// check authorizes and finds channel (already validated) for a caller.
func (s *Server) check(r *http.Request, channelName string) (status int, code string, err error) {
	if s.cfg.Channels != nil && !s.cfg.Channels(channelName) {
		return http.StatusNotFound, "unknown_channel", fmt.Errorf("no channel %q", channelName)
	}
	if s.cfg.Authorize != nil {
		if err := s.cfg.Authorize(r, channelName); err != nil {
			return http.StatusForbidden, "forbidden", err
		}
	}
	return 0, "", nil
}

// ackRow is the name of a client's ack row: its id, scoped by its principal.
func (s *Server) ackRow(r *http.Request, id string) string {
	if s.cfg.Principal == nil {
		return id
	}
	return s.cfg.Principal(r) + "/" + id
}
