"""Every study's report section (reports.sections.Section), in report order: the one list a new
study adds itself to. The report takes them as an argument (reports may not import the studies);
longhaul.appliance.report passes this tuple."""

from __future__ import annotations

from longhaul.collectors.studies.ops.section import SECTION as OPS
from longhaul.collectors.studies.stiff_udp.section import SECTION as STIFF_UDP
from longhaul.collectors.studies.throughput_profile.section import SECTION as THROUGHPUT_PROFILE

SECTIONS = (THROUGHPUT_PROFILE, OPS, STIFF_UDP)
