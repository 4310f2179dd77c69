/*
 * commands.h - the pkv tool's commands. Each takes the words after its name and returns the
 * process exit code (cli.h: 0 ok, 1 failed, 2 usage error).
 */
#ifndef PKV_TOOLS_COMMANDS_H
#define PKV_TOOLS_COMMANDS_H

int cmd_profile(int argc, char **argv);  /* profile.c */
int cmd_simulate(int argc, char **argv); /* simulate.c */
int cmd_demo(int argc, char **argv);     /* demo.c */
int cmd_soak(int argc, char **argv);     /* soak.c */
int cmd_store(int argc, char **argv);    /* store.c */

#endif /* PKV_TOOLS_COMMANDS_H */
