mod bucket_schedules;
mod clock;
mod group_commit;
mod lua_scripts;
mod press_again;
mod returns;
mod schedules;
mod sql_procedures;
