"""/api/v1/profiles: the throughput profiles (list: any user; store: admin)."""

from __future__ import annotations

from fastapi import APIRouter

from schedulearn.protocol import ProfileImport, ProfileImportReply, ProfileList
from schedulearn.server.api.deps import Admin, State, User
from schedulearn.server.errors import ERROR_RESPONSES
from schedulearn.server.services import profiles

router = APIRouter(prefix="/api/v1/profiles", tags=["profiles"], responses=ERROR_RESPONSES)


@router.get("", response_model=ProfileList, summary="Throughput profiles, measured and imported")
async def list_profiles(state: State, _who: User) -> ProfileList:
    return await state.db.run(profiles.list_profiles)


@router.post(
    "",
    response_model=ProfileImportReply,
    summary="Store throughput profiles (admin); the latest for a key wins",
)
async def import_profiles(body: ProfileImport, state: State, _who: Admin) -> ProfileImportReply:
    return await state.db.run(profiles.import_profiles, body, state.clock.now())
