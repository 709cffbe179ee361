"""The Slack directory: members of user groups (who may review), cached in Redis."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from redis.asyncio import Redis
from slack_sdk.errors import SlackApiError

from approvals._internal.policy import Route
from approvals._internal.service import MembershipResolver
from approvals._internal.slack_ids import is_user, is_user_group
from approvals._internal.store.keys import Keys
from approvals.models import ApprovalRequest

log = logging.getLogger(__name__)

#: How long a user group's member list is trusted before asking Slack again.
GROUP_CACHE_SECONDS = 300
_EMPTY_MARKER = "-"


async def reviewer_users(
    request: ApprovalRequest, membership: MembershipResolver | None
) -> list[str]:
    """The Slack users who may review `request`: its user reviewers, then the members of its
    user groups (none when no directory resolves them)."""
    users = [r for r in request.reviewers if is_user(r)]
    for group in (r for r in request.reviewers if is_user_group(r)):
        users += sorted(await membership(group)) if membership else []
    return users


async def review_dms(
    request: ApprovalRequest, routes: Mapping[str, Route], membership: MembershipResolver | None
) -> list[str]:
    """The users to DM that `request` needs their review (its route says `dm_reviewers`):
    its reviewers, each once, never its requester (who may not decide it)."""
    route = routes.get(request.route)
    if route is None or not route.dm_reviewers:
        return []
    users = await reviewer_users(request, membership)
    return [u for u in dict.fromkeys(users) if u != request.requester]


class Directory:
    """Resolves user-group ids to member user ids via `usergroups.users.list`."""

    def __init__(
        self, slack: Any, redis: Redis, keys: Keys, cache_seconds: int = GROUP_CACHE_SECONDS
    ) -> None:
        self.slack = slack
        self.redis = redis
        self.keys = keys
        self.cache_seconds = cache_seconds

    async def members(self, group_id: str) -> frozenset[str]:
        key = self.keys.usergroup(group_id)
        cached = await self.redis.smembers(key)
        if cached:
            return frozenset(str(m) for m in cached if m != _EMPTY_MARKER)
        if self.slack is None:
            return frozenset()
        try:
            response = await self.slack.usergroups_users_list(usergroup=group_id)
        except SlackApiError as e:
            log.warning(
                "usergroup lookup failed group=%s error=%s",
                group_id,
                e.response.get("error") if e.response else e,
            )
            return frozenset()
        users = [str(u) for u in response.get("users", [])]
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.sadd(key, *(users or [_EMPTY_MARKER]))
            pipe.expire(key, self.cache_seconds)
            await pipe.execute()
        return frozenset(users)
