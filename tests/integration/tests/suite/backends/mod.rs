mod bucket_schedules;
mod clock;
mod draw_lines;
mod group_commit;
mod lua_scripts;
mod returns;
mod schedules;
mod sql_procedures;
