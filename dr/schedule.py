"""The drill schedule: cron, five fields (`0 3 * * 0`: Sundays at 03:00 UTC), or six with
seconds first (`*/30 * * * * *`), as an apscheduler trigger."""
from __future__ import annotations


class ScheduleError(ValueError):
    """One line: the drill schedule is not cron."""


def drill_trigger(schedule: str):
    """An apscheduler trigger for a cron line of five fields, or six with seconds first."""
    from apscheduler.triggers.cron import CronTrigger

    fields = schedule.split()
    try:
        if len(fields) == 5:
            return CronTrigger.from_crontab(schedule, timezone="UTC")
        if len(fields) == 6:
            second, minute, hour, day, month, day_of_week = fields
            return CronTrigger(second=second, minute=minute, hour=hour, day=day, month=month,
                               day_of_week=day_of_week, timezone="UTC")
    except ValueError as exc:
        raise ScheduleError(f"{schedule!r} is not cron: {exc}") from None
    raise ScheduleError(f"{schedule!r} has {len(fields)} fields; cron has 5 "
                        f"(minute hour day month weekday), or 6 with seconds first")
