#pragma once

// The upstream connections one owner's calls are forwarded on: one that
// takes new streams, opened on the first call that needs it (and again after
// a failed connect); those retired by the backend's GOAWAY (or out of stream
// ids), finishing their streams. A lost connection's calls are answered
// UNAVAILABLE. Held by its UpstreamOwner (upstream_owner.h), which it calls
// back; runs on the owner's EventLoop; not thread-safe.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "proxy/call.h"
#include "proxy/event_loop.h"
#include "proxy/relay.h"
#include "proxy/upstream.h"
#include "proxy/upstream_owner.h"

namespace crihook::relay {

class UpstreamSet {
 public:
  // `owner` holds the set; `loop` (the owner's) and `ctx` (the backend's
  // path, endpoint for messages, connect timeout, log) outlive it.
  UpstreamSet(UpstreamOwner& owner, EventLoop& loop, const RelayContext& ctx)
      : owner_(owner), loop_(loop), ctx_(ctx) {}

  // Forwards `call` on the connection that takes new streams (an
  // intercepted call's request is sent from its forward_body, again on a
  // retry). While none is connected the call waits and a connect starts; when
  // it completes the waiting calls still alive and unanswered are forwarded,
  // or, when it failed, answered UNAVAILABLE naming the backend
  // (UpstreamOwner::answer) and the owner flushed. Never answers
  // synchronously.
  void forward(Call& call);

  // The owner's UpstreamOwner::onUpstreamGoaway: `up` takes no new streams.
  void onGoaway(Upstream& up);
  // The owner's UpstreamOwner::onUpstreamLost: answers each unfinished call
  // of `up` UNAVAILABLE "backend connection lost: <why>" (an intercepted
  // call's reply not begun gets it as its reply, UpstreamOwner::onResponseEnd;
  // others through UpstreamOwner::answer), forgets `up`, flushes the owner.
  void onLost(Upstream& up, const std::string& why);

  // The owner closes: every connection is detached and closed with `why`
  // (the runtime cancels their streams), and the waiting calls are
  // forgotten. Nothing is called back.
  void dropAll(const std::string& why);

 private:
  // The connection that takes new streams, if any; one the backend retired
  // since moves to draining_.
  std::shared_ptr<Upstream> current();
  void onConnected(const std::shared_ptr<Upstream>& up, const std::string& error);

  UpstreamOwner& owner_;
  EventLoop& loop_;
  const RelayContext& ctx_;
  std::shared_ptr<Upstream> upstream_;               // takes new streams
  std::vector<std::shared_ptr<Upstream>> draining_;  // finishing old streams
  std::vector<int32_t> waiting_;                     // calls waiting for the connect
  bool connecting_ = false;
};

}  // namespace crihook::relay
