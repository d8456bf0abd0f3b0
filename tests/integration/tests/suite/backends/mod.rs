mod bucket_schedules;
mod clock;
mod group_commit;
mod lua_scripts;
mod returns;
mod reused_ids;
mod schedules;
mod sql_procedures;
