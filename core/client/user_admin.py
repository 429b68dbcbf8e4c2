"""UserAdmin: SCRAM credentials through AlterUserScramCredentials and
DescribeUserScramCredentials (KIP-554), as Kafka's Admin.alterUserScramCredentials does.

The password never leaves the client: it is salted (a fresh 32-byte salt) and hashed with
PBKDF2 here, and only SaltedPassword is sent; the controller derives the keys it stores. A
request goes to any broker, which forwards the change to the controller.
"""
from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Iterable

from core.protocol import messages as m
from core.protocol.errors import KafkaError

from .admin_core import AdminCore
from .sasl import salted_password

ALTER_USER_SCRAM_CREDENTIALS = 51
DESCRIBE_USER_SCRAM_CREDENTIALS = 50


class ScramMechanism(enum.IntEnum):
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def kafka_name(self) -> str:
        return self.name.replace("_", "-")

    @classmethod
    def parse(cls, text: str) -> "ScramMechanism":
        try:
            return cls[text.strip().upper().replace("-", "_")]
        except KeyError:
            raise ValueError(f"{text!r} is not SCRAM-SHA-256 or SCRAM-SHA-512") from None


@dataclass(frozen=True)
class ScramUpsertion:
    user: str
    mechanism: ScramMechanism
    password: str
    iterations: int = 4096


@dataclass(frozen=True)
class ScramDeletion:
    user: str
    mechanism: ScramMechanism


class UserAdmin(AdminCore):
    async def alter_user_scram_credentials(self, alterations: Iterable[ScramUpsertion | ScramDeletion]
                                           ) -> dict[str, KafkaError | None]:
        """Per user: None, or the KafkaError the controller answered with."""
        R = m.AlterUserScramCredentialsRequest
        deletions, upsertions = [], []
        for a in alterations:
            if isinstance(a, ScramDeletion):
                deletions.append(R.ScramCredentialDeletion(name=a.user, mechanism=int(a.mechanism)))
            else:
                salt = os.urandom(32)
                upsertions.append(R.ScramCredentialUpsertion(
                    name=a.user, mechanism=int(a.mechanism), iterations=a.iterations, salt=salt,
                    salted_password=salted_password(a.mechanism.kafka_name, a.password.encode(), salt, a.iterations)))
        request = R(deletions=deletions, upsertions=upsertions)

        async def once():
            conn = await self.client.connection(await self.client.any_node())
            resp = await conn.send(request, api_key=ALTER_USER_SCRAM_CREDENTIALS)
            return {r.user: (KafkaError(r.error_code, r.error_message or "alter SCRAM credentials")
                             if r.error_code else None) for r in resp.results}

        await self.client.start()
        return await self.client.call(once, timeout_ms=self.timeout_ms)

    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                              ) -> dict[str, list[tuple[ScramMechanism, int]] | KafkaError]:
        """Per user: [(mechanism, iterations)], or the KafkaError (RESOURCE_NOT_FOUND for a
        user without credentials). None: every user that has any."""
        R = m.DescribeUserScramCredentialsRequest
        names = None if users is None else [R.UserName(name=u) for u in users]

        async def once():
            conn = await self.client.connection(await self.client.any_node())
            resp = await conn.send(R(users=names), api_key=DESCRIBE_USER_SCRAM_CREDENTIALS)
            if resp.error_code:
                raise KafkaError(resp.error_code, resp.error_message or "describe SCRAM credentials")
            out: dict[str, list[tuple[ScramMechanism, int]] | KafkaError] = {}
            for r in resp.results:
                out[r.user] = (KafkaError(r.error_code, r.error_message or r.user) if r.error_code
                               else [(ScramMechanism(i.mechanism), i.iterations) for i in r.credential_infos])
            return out

        await self.client.start()
        return await self.client.call(once, timeout_ms=self.timeout_ms)
