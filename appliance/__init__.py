"""longhaul.appliance"""
