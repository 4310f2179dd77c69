/*
 * profile.h - what profile.c shares with profile_json.c (`pkv profile --json`).
 */
#ifndef PKV_TOOLS_PROFILE_H
#define PKV_TOOLS_PROFILE_H

#include <pkv/pkv.h>

/* "cpu", "cuda" or "auto" for a PKV_DEVICE_*. */
const char *profile_device_name(int32_t device);

/* The JSON object of a profile: the config's path, pkv_profile's status and message (error, ""
 * when none), the model, every budget term and the groups and comparisons (variants_print_json). */
void profile_print_json(const char *config, const pkv_engine_params *p, const pkv_kv_budget *b,
                        pkv_status s, const char *error);

#endif /* PKV_TOOLS_PROFILE_H */
