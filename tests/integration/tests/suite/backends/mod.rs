mod bucket_schedules;
mod clock;
mod give_backs;
mod group_commit;
mod lua_scripts;
mod returns;
mod schedules;
mod sql_procedures;
